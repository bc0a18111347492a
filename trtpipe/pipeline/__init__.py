"""``trtpipe run``: the whole pipeline from one TOML file, each stage cached by the content of its inputs."""
