"""The OpenAPI description of the HTTP routes `trtpipe serve` answers (served at ``/v2/openapi.json``).

Every status code a route can answer is listed with what it means; anything else (a 5xx not listed here) is a
defect, which the server's fuzz test looks for.
"""

from __future__ import annotations

from typing import Any

from trtpipe.vocab import DTYPES, __version__

ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
TENSOR = {
    "type": "object", "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string", "enum": sorted(d.kserve for d in DTYPES)},
        "parameters": {"type": "object", "properties": {"binary_data_size": {"type": "integer", "minimum": 0}}},
        "data": {"type": "array", "description": "flat or nested, row-major; absent with binary data"},
    },
}
INFER_REQUEST = {
    "type": "object", "required": ["inputs"],
    "properties": {
        "id": {"type": "string"},
        "parameters": {"type": "object", "properties": {"binary_data_output": {"type": "boolean"}}},
        "inputs": {"type": "array", "items": TENSOR},
        "outputs": {"type": "array", "items": {
            "type": "object", "required": ["name"],
            "properties": {"name": {"type": "string"},
                           "parameters": {"type": "object", "properties": {"binary_data": {"type": "boolean"}}}}}},
    },
}
DOCUMENTED = {
    "400": "malformed request: the body names the field", "404": "unknown model, version or route",
    "405": "method not allowed", "408": "the body did not arrive within --body-timeout-s",
    "413": "body over --max-body-mb", "503": "model not ready, queue full (--max-queue) or shutting down",
    "504": "inference past --timeout-ms",
}
INFER_STATUSES = ("400", "404", "405", "408", "413", "503", "504")


def _responses(ok: dict[str, Any], *codes: str) -> dict[str, Any]:
    out: dict[str, Any] = {"200": {"description": "success", "content": {"application/json": {"schema": ok}}}}
    for code in codes:
        out[code] = {"description": DOCUMENTED[code], "content": {"application/json": {"schema": ERROR}}}
    return out


def openapi() -> dict[str, Any]:
    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    version = {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}}
    ready = {"type": "object", "properties": {"ready": {"type": "boolean"}, "reason": {"type": "string"}}}
    metadata = {"type": "object", "properties": {"name": {"type": "string"}, "versions": {"type": "array"},
                                                 "platform": {"type": "string"}, "inputs": {"type": "array"},
                                                 "outputs": {"type": "array"}}}
    infer = {"post": {
        "summary": "Run the model (JSON tensors, or Triton's binary tensor extension with "
                   "Inference-Header-Content-Length)",
        "requestBody": {"required": True, "content": {"application/json": {"schema": INFER_REQUEST},
                                                      "application/octet-stream": {}}},
        "responses": _responses({"type": "object"}, *INFER_STATUSES)}}
    paths: dict[str, Any] = {
        "/v2": {"get": {"summary": "server metadata", "responses": _responses({"type": "object"})}},
        "/v2/health/live": {"get": {"summary": "liveness", "responses": _responses({"type": "object"})}},
        "/v2/health/ready": {"get": {"summary": "readiness (503, with the reason, while a model or the gRPC listener "
                                                "is not ready, or shutting down)",
                                     "responses": _responses(ready, "503")}},
        "/v2/models/{name}": {"get": {"parameters": [name], "responses": _responses(metadata, "404", "503")}},
        "/v2/models/{name}/versions/{version}": {"get": {"parameters": [name, version],
                                                         "responses": _responses(metadata, "404", "503")}},
        "/v2/models/{name}/ready": {"get": {"parameters": [name], "responses": _responses(ready, "400", "404")}},
        "/v2/models/{name}/versions/{version}/ready": {"get": {"parameters": [name, version],
                                                               "responses": _responses(ready, "400", "404")}},
        "/v2/models/{name}/infer": {**infer, "parameters": [name]},
        "/v2/models/{name}/versions/{version}/infer": {**infer, "parameters": [name, version]},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text"}}}},
        "/v2/openapi.json": {"get": {"summary": "this description", "responses": _responses({"type": "object"})}},
    }
    return {"openapi": "3.0.3", "info": {"title": "trtpipe serve (KServe v2 / Open Inference Protocol)",
                                         "version": __version__}, "paths": paths}
