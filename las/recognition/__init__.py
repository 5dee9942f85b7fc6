"""A trained model turned into transcripts: the `Recognizer` (files, arrays, manifests, long
recordings cut at their pauses), the batched decoding loop that training's dev pass shares
(las.recognition.inference), word times and confidences, subtitles, `las decode`, `las align`,
`las eval`, and the plots of attention and of training curves (`las plot`).

Layer 5: may use las.core, las.data, las.model, las.search and las.export.
"""
