"""`las train` and `las pretrain`: the corpus and its batches, optimisation, the dev pass, several
processes (torchrun), checkpoints written and averaged, monitoring, initialisation from a model.

Layer 6: may use every layer below it (las.core to las.recognition).
"""
