"""Two small training scripts, the same training written twice: ``train_dp`` with DataParallel and ``train_ddp``
with DistributedDataParallel, both taking the data and the model from ``common``. Lesson 17 shows the diff
between them and runs both::

    python -m dpcourse.scripts.train_dp --out dp.pt
    torchrun --standalone --nproc_per_node=2 -m dpcourse.scripts.train_ddp --out ddp.pt
"""
