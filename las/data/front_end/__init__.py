"""Audio and the front end: reading audio and PCM streams, the torch-only signal processing,
level, declipping, dereverberation, where speech and pauses lie, and the log-mel features of whole
recordings and of audio as it arrives."""
