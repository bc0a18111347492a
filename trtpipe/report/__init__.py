"""Reports of bench results: terminal table, Markdown, JSON and a self-contained HTML page with charts."""
