"""Duet's inference engine: llama.cpp contexts driven through llama-cpp-python's low-level API.

This package never imports Qt; the GUI (``app``) consumes the engine's event stream.
"""
