"""A small convolutional network on scikit-learn's bundled 8x8 digits, on the default device.

    python examples/digits_cnn.py [--device CPU] [--epochs 15]

Two 3x3 convolutions and a linear classifier; the script fails unless the test accuracy reaches 95%. On an
interactive terminal a progress line shows the epoch, the running loss and samples per second (`LAZY_PROGRESS`).
"""

from __future__ import annotations

import time

from digits import load
from training import classification_step, place, setup, train_epochs

from lazy import Tensor, nn
from lazy.nn.optim import Adam


class CNN:
    def __init__(self) -> None:
        self.c1, self.c2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def __call__(self, x: Tensor) -> Tensor:  # (B, 64) -> (B, 10)
        x = self.c1(x.reshape(-1, 1, 8, 8)).relu()  # (B, 8, 8, 8)
        x = self.c2(x).relu()  # (B, 16, 4, 4)
        return self.fc(x.flatten(1))


def main() -> float:
    args, device = setup(__doc__, epochs=15, batch=64)
    x_train, y_train, x_test, y_test = load()
    model = CNN()
    opt = Adam(place(model, device), lr=3e-3)
    step = classification_step(model, opt)

    print(f"training a CNN on {device}: {len(x_train)} train / {len(x_test)} test digits")
    start = time.perf_counter()
    train_epochs(args, step, lambda data: Tensor(data, device=device), x_train, y_train, start)
    with Tensor.inference_mode():
        pred = model(Tensor(x_test, device=device)).argmax(-1).numpy()
    accuracy = float((pred == y_test).mean())
    print(f"test accuracy: {accuracy * 100:.2f}% ({time.perf_counter() - start:.1f} s)")
    if accuracy < 0.95:
        raise SystemExit(f"expected at least 95% test accuracy, got {accuracy * 100:.2f}%")
    return accuracy


if __name__ == "__main__":
    main()
