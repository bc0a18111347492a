"""HTTP: the Open Inference Protocol routes (Starlette), uvicorn's protocol, request bodies and the OpenAPI page."""
