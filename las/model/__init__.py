"""Listen, Attend and Spell: listener, attention variants, speller, their composition, the
training objectives (las.model.losses), how diagonal attention is (las.model.alignment), and the
model's saved form (las.model.checkpoint).

Layer 2: may use las.core and las.data.
"""
