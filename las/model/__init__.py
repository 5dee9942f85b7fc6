"""Listen, Attend and Spell: listener, attention variants, speller, and their composition."""
