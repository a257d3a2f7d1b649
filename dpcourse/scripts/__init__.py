"""Two small training scripts, the same training written twice: ``train_dp`` with DataParallel and ``train_ddp``
with DistributedDataParallel, both training the running example (``dpcourse.examples``) with the settings and
the dataset of ``common``. Lesson 17 shows the diff between them and runs both::

    python -m dpcourse.scripts.train_dp --out dp.pt
    torchrun --standalone --nproc_per_node=2 -m dpcourse.scripts.train_ddp --out ddp.pt
    python -m dpcourse.scripts.train_ddp --nproc 2 --out ddp.pt      # runs that torchrun itself

``train_ddp`` ends with a check: rank 0 trains the same batches on one device and compares the weights.
"""
