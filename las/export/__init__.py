"""A checkpoint as ONNX graphs (las.export.writer, `las export`), and the runtime that decodes
with them as the PyTorch model does (las.export.runtime).

Layer 4: may use las.core, las.data, las.model and las.search.
"""
