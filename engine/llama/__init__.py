"""The llama.cpp layer: the one import of llama-cpp-python's bindings, models, contexts (decode, rewind,
shift, sequences), RPC devices and the ``duet-cli worker`` that serves them, detokenization.

May import: models."""
