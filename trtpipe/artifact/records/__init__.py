"""The artifact's records: the metadata files trtpipe keeps beside an artifact, each read and written here only.

Four files, each with its own module, its path rule, schema string, checked reader and atomic writer:

- ``manifest.py``: ``NAME.manifest.json`` beside every ONNX file (``model.pt2.manifest.json`` beside a package):
  what the artifact is and each stage's account of making it; its shared sections are typed in ``sections.py``
  and an AOTInductor package's section in ``package.py``.
- ``engine.py``: the TensorRT engine's sidecar, ``model.plan.json`` beside ``model.plan``: what the engine was
  built for (TensorRT version, GPU, profiles), checked before anything is deserialised.
- ``tuned.py``: ``model.tuned.json``, the ONNX Runtime settings a probe chose for the artifact.
- ``calibration.py``: ``model.calib.json`` (or ``--calib-cache``), INT8 calibration ranges under the key they were
  made with, reused by optimize while the model and the data are unchanged.

Each is read as a JSON document through ``document.py`` (one refusal for every way a file can be unreadable).
An artifact and its record (manifest or sidecar) reach the disk as one commit through ``commit.py``
(``commit_artifact`` and ``commit_engine`` stamp their record, then call its ``commit``). Every record refuses a
damaged file in one line naming the file and the fix. No module outside ``trtpipe/artifact`` builds these files'
paths or opens them (tests/artifact/test_records_walk.py walks the package): stages and runtimes call the readers
and writers here.
"""
