"""The artifact as a program holds it: ``trtpipe.load`` (``load.py``), a file opened on the runtime it needs."""
