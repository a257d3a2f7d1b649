"""How the DDP lessons run real ranks: start them, send them a notebook's function, count their traffic.

* ``launcher``: ``launch(worker, world_size)``, one process per rank from a notebook cell, results back.
* ``by_source``: a function written in a notebook cell, sent to the ranks as source text.
* ``learner``: a learner's collective run on real ranks next to torch's.
* ``torchrun``: a script under ``torchrun``, with a deadline and no process left behind.
* ``traffic``: the bytes a rank sends and receives, and the collectives it calls.

Nothing here is DDP itself; it is the apparatus the lessons (and Part III) stand on.
"""
