"""Train a small MLP with DataParallel: one process splits every batch over the devices.

    python -m dpcourse.scripts.train_dp --devices 2 --epochs 2 --out dp.pt

dpcourse.DataParallel is called as torch.nn.DataParallel is, and also splits over CPU "devices".
"""

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, RandomSampler

from dpcourse.data_parallel import DataParallel
from dpcourse.devices import devices as choose_devices
from dpcourse.scripts.common import BATCH, LR, SEED, make_dataset, make_model


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2, help="how many devices (replicas) to split over")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", default="dp.pt", help="where to save the trained weights")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    devices = choose_devices(args.devices)
    device = devices[0]
    model = DataParallel(make_model().to(device), devices)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    dataset = make_dataset()
    for epoch in range(args.epochs):
        order = RandomSampler(dataset, generator=torch.Generator().manual_seed(SEED + epoch))
        for x, y in DataLoader(dataset, batch_size=BATCH, sampler=order):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
        shown = loss.detach()
        print(f"epoch {epoch}: loss of the last batch {shown.item():.4f}", flush=True)
    torch.save(model.module.state_dict(), args.out)


if __name__ == "__main__":
    main()
