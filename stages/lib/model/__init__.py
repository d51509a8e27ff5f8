"""The model wing: building models, export formats, ONNX cleaning, parity, provenance."""
