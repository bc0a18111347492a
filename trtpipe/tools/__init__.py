"""Tools that drive a server from outside: load generation (``trtpipe loadtest``), loopback helpers and a real Triton
server for the tests and measurement scripts. Only the CLI's ``loadtest`` command imports it (import-linter).
"""
