"""Serving: SavedModel export and its text signatures, the Predictor, ONNX."""
