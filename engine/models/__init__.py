"""Model files on disk: the starter catalog and its fetcher, the models folder, a file's identity,
embedding conversion, why a draft cannot pair, and Hugging Face (hub/).

May import: nothing."""
