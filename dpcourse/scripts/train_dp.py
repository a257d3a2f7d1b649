"""Train the running example with DataParallel: one process splits every batch over the devices.

    python -m dpcourse.scripts.train_dp --devices 2 --epochs 2 --out dp.pt

dpcourse.DataParallel is called as torch.nn.DataParallel is, and also splits over CPU "devices".
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler

from dpcourse.data_parallel import DataParallel
from dpcourse.devices import devices as choose_devices
from dpcourse.examples import make_model, regression_loss
from dpcourse.scripts.common import BATCH, LR, SEED, make_dataset


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2, help="how many devices (replicas) to split over")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", default="dp.pt", help="where to save the trained weights")
    return parser.parse_args(argv)


def train(devices: list[torch.device], epochs: int) -> nn.Module:
    """``epochs`` of SGD, every batch split over ``devices``; prints each epoch's last loss, returns the model.

    On one device DataParallel calls the model itself: ``train([device], epochs)`` is one-device training.
    """
    device = devices[0]
    model = DataParallel(make_model().to(device), devices)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    dataset = make_dataset()
    for epoch in range(epochs):
        order = RandomSampler(dataset, generator=torch.Generator().manual_seed(SEED + epoch))
        for x, y in DataLoader(dataset, batch_size=BATCH, sampler=order):
            optimizer.zero_grad()
            loss = regression_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
        shown = loss.detach()
        print(f"epoch {epoch}: loss of the last batch {shown.item():.4f}", flush=True)
    return model.module


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    model = train(choose_devices(args.devices), args.epochs)
    torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
