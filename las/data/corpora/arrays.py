"""Reading `.npy` files without ever running code from them.

Plain arrays load with `allow_pickle=False`. Object arrays (CMU 11-785 HW4's arrays of
per-utterance feature matrices or transcripts) are a pickle after the `.npy` header, and a pickle
can call any function on load; they go through an unpickler that builds numpy arrays, dtypes and
scalars and refuses everything else — as `torch.load(weights_only=True)` does for checkpoints.
"""

from __future__ import annotations

import io
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from las.core.errors import LasError

# Everything the pickle of an object array of numeric or string arrays refers to.
ARRAY_GLOBALS = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),  # numpy 1.x pickles
    ("numpy._core.multiarray", "_reconstruct"),  # numpy 2.x pickles
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("_codecs", "encode"),  # byte strings in pickles written by Python 2
}


class ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ARRAY_GLOBALS:
            raise pickle.UnpicklingError(f"it asks for {module}.{name}; las loads numpy arrays only")
        with warnings.catch_warnings():  # numpy 2 warns about the numpy.core names of old pickles
            warnings.simplefilter("ignore", DeprecationWarning)
            return super().find_class(module, name)


HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def load_array(path: Path, content: bytes | None = None) -> np.ndarray:
    """The array in the `.npy` file at `path` (or in `content`, its bytes); one LasError for a
    damaged, foreign or unsafe file."""
    try:
        with open(path, "rb") if content is None else io.BytesIO(content) as file:
            version = np.lib.format.read_magic(file)
            read_header = HEADER_READERS.get(version)
            if read_header is None or not read_header(file)[2].hasobject:
                file.seek(0)
                return np.load(file, allow_pickle=False)
            array = ArrayUnpickler(file, encoding="bytes").load()  # the rest of the file is the pickle
    except pickle.UnpicklingError as error:
        raise LasError(f"refusing {path}: {error}") from None
    except (OSError, ValueError, EOFError, TypeError, AttributeError) as error:
        raise LasError(f"cannot read {path}: {error}") from None
    if not isinstance(array, np.ndarray):
        raise LasError(f"cannot read {path}: it holds a {type(array).__name__}, not an array")
    return array


def array_shape(path: Path) -> tuple[int, ...]:
    """The shape of the array in the `.npy` file at `path`, from its header alone."""
    try:
        with open(path, "rb") as file:
            version = np.lib.format.read_magic(file)
            read_header = HEADER_READERS.get(version)
            if read_header is None:
                raise ValueError(f"unsupported .npy version {version}")
            shape, _, dtype = read_header(file)
    except (OSError, ValueError, EOFError) as error:
        raise LasError(f"cannot read {path}: {error}") from None
    if dtype.hasobject:
        raise LasError(f"{path}: an object array, not one utterance's (frames, dim) features")
    return shape
