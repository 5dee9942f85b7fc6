"""Augmentation: SpecAugment, what a recording meets on its way (rooms, noise, telephone lines,
gains, compressors), sounds that are not speech, and words cut out at their times."""
