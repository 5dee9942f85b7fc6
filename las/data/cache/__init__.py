"""The verified feature cache: shards and their index, features extracted ahead or as batches
first read them, what it holds and trimming it (`las cache`)."""
