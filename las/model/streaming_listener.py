"""A listener for streaming (`model.listener=plstm`): a pyramid of LSTMs that read forwards only,
then a look-ahead of `model.lookahead` encoder frames. What it makes of a frame depends on the
audio up to a bounded time after it, so it can run as the audio arrives (`ListenerStream`) and
give what it gives over the whole recording in training.

The pBLSTM's backward direction hears the whole recording before its first frame; here each
encoder frame hears its own 2**layers input frames and everything before them, and the top
layer mixes in the next `lookahead` encoder frames (row convolution, as in Deep Speech 2): the
look-ahead is `lookahead` x 2**layers x hop, 80 ms at 2 frames of 40 ms.
"""

from __future__ import annotations

import torch
from torch import nn

from las.model.listener import Listener, ListenerOutput, LockedDropout, halve_lengths, length_mask

LSTMState = tuple[torch.Tensor, torch.Tensor]


class ForwardListener(nn.Module):
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        pyramid_layers: int,
        key_dim: int,
        value_dim: int,
        dropout: float,
        lookahead: int,
        locked_dropout: bool = False,
    ) -> None:
        super().__init__()
        self.input_layer = nn.LSTM(input_size, hidden_size, batch_first=True)
        # Each pyramid layer reads two adjacent frames concatenated.
        layers = (nn.LSTM(2 * hidden_size, hidden_size, batch_first=True) for _ in range(pyramid_layers))
        self.pyramid = nn.ModuleList(layers)
        self.lookahead = lookahead
        self.ahead = nn.Linear((lookahead + 1) * hidden_size, hidden_size) if lookahead else None
        self.dropout = LockedDropout(dropout) if locked_dropout else nn.Dropout(dropout)
        self.key = nn.Linear(hidden_size, key_dim)
        self.value = nn.Linear(hidden_size, value_dim)
        self.input_size, self.output_size = input_size, hidden_size

    stacking = 1  # input frames are not stacked: a stream's groups are the pyramid's
    reduced = Listener.reduced  # the same halvings: encoder frames of utterances of so many frames
    reduction = Listener.reduction

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> ListenerOutput:
        # features: (batch, frames, input_size); lengths: (batch,)
        lengths = lengths.to(features.device, non_blocking=True)
        # Zero past each length: a pyramid layer pairs an odd last frame with a zero frame, and
        # the look-ahead hears zeros past the end, as a stream does when it finishes.
        x = masked(self.input_layer(features)[0], lengths)  # (batch, frames, hidden)
        for layer in self.pyramid:
            x, lengths = self.dropout(x), halve_lengths(lengths)
            x = nn.functional.pad(x, (0, 0, 0, x.shape[1] % 2))
            batch, frames, size = x.shape
            x = masked(layer(x.reshape(batch, frames // 2, 2 * size))[0], lengths)  # (batch, frames / 2, hidden)
        x = self.dropout(masked(self.heard_ahead(nn.functional.pad(x, (0, 0, 0, self.lookahead))), lengths))
        return self.output(x, lengths)

    def heard_ahead(self, x: torch.Tensor) -> torch.Tensor:
        """`(batch, frames + lookahead, hidden)` -> `(batch, frames, hidden)`: each frame with what
        the next `lookahead` frames add (a residual, so that a look-ahead of 0 is the frame)."""
        frames = max(0, x.shape[1] - self.lookahead)  # a stream has none until the look-ahead has come
        if self.ahead is None:
            return x
        stacked = torch.cat([x[:, shift : shift + frames] for shift in range(self.lookahead + 1)], dim=-1)
        return x[:, :frames] + torch.tanh(self.ahead(stacked))

    def output(self, x: torch.Tensor, lengths: torch.Tensor) -> ListenerOutput:
        """Keys, values and mask of the top frames `x` `(batch, frames, hidden)`."""
        return ListenerOutput(self.key(x), self.value(x), length_mask(lengths, x.shape[1]), lengths, x)

    def stream(self) -> ListenerStream:
        """A stream of one recording's frames through this listener (in eval mode)."""
        return ListenerStream(self)


class ListenerStream:
    """The listener over one recording's features as they arrive: `push` frames in any number,
    get back the top frames `(frames, hidden)` that every frame they hear has reached; `finish`
    gives the rest, as the whole recording's pass ends. What it keeps between pushes is bounded:
    each LSTM's state, a frame waiting for its pair at each pyramid layer, and the `lookahead`
    top frames waiting for theirs."""

    def __init__(self, listener: ForwardListener) -> None:
        self.listener = listener
        self.states: list[LSTMState | None] = [None] * (1 + len(listener.pyramid))
        hidden = listener.output_size
        parameter = next(listener.parameters())
        self.unpaired = [parameter.new_zeros(1, 0, hidden) for _ in listener.pyramid]
        self.waiting = parameter.new_zeros(1, 0, hidden)  # top frames whose look-ahead has not arrived

    @torch.no_grad()
    def push(self, features: torch.Tensor) -> torch.Tensor:
        """`(frames, input_size)` -> the top frames now complete `(ready, hidden)`."""
        return self.advance(features, finished=False)

    @torch.no_grad()
    def finish(self) -> torch.Tensor:
        """The remaining top frames `(ready, hidden)`: an odd last frame of a layer paired with a
        zero frame, the look-ahead of the last ones zeros, as in the whole recording's pass."""
        return self.advance(self.waiting.new_zeros(0, self.listener.input_size), finished=True)

    def advance(self, features: torch.Tensor, finished: bool) -> torch.Tensor:
        listener = self.listener
        x = self.run(0, listener.input_layer, features[None])  # (1, frames, hidden)
        for index, layer in enumerate(listener.pyramid, start=1):
            x = torch.cat([self.unpaired[index - 1], x], dim=1)
            if finished:
                x = nn.functional.pad(x, (0, 0, 0, x.shape[1] % 2))
            paired = x.shape[1] // 2 * 2
            self.unpaired[index - 1] = x[:, paired:]
            x = self.run(index, layer, x[:, :paired].reshape(1, paired // 2, 2 * x.shape[2]))
        x = torch.cat([self.waiting, x], dim=1)
        if finished:
            x = nn.functional.pad(x, (0, 0, 0, listener.lookahead))
        ready = max(0, x.shape[1] - listener.lookahead)
        self.waiting = x[:, ready:] if not finished else x[:, :0]
        return listener.heard_ahead(x[:, : ready + listener.lookahead])[0]

    def run(self, index: int, lstm: nn.LSTM, x: torch.Tensor) -> torch.Tensor:
        """LSTM `index` over `x` `(1, frames, size)` from where it stopped."""
        if x.shape[1] == 0:
            return x.new_zeros(1, 0, lstm.hidden_size)
        output, self.states[index] = lstm(x, self.states[index])
        return output


def masked(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`x` `(batch, frames, size)` with zeros past each row's length `(batch,)`."""
    return x * length_mask(lengths, x.shape[1])[:, :, None]
