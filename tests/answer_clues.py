"""For every quiz question a lesson asks, the text of the outputs that would give its answer away.

``tests/test_predictions_hidden.py`` checks that no stored output shows a clue before its quiz is answered, and
``tests/browser/test_answers_hidden.py`` that none is visible in JupyterLab; both read ``CLUES`` and the helpers
here that find a lesson's questions and a cell's text.
"""

import functools
import re
from pathlib import Path

import jupytext
import nbformat

from dpcourse.quiz import load_lesson

NOTEBOOKS = Path(__file__).parents[1] / "notebooks"
ASK = re.compile(r"""quiz\.ask\(\s*["']([\w.-]+)["']""")
ASK_LESSON = re.compile(r"""quiz\.ask_lesson\(\s*["'](\w+)["']""")
REVEAL = re.compile(r"quiz\.reveal\(([^)]*)\)")

# Question id -> text of the outputs that give its answer away. () when no output of the lessons that ask it
# does: its answer shows only in the quiz's own explanation and experiment, which appear after an answer.
CLUES: dict[str, tuple[str, ...]] = {
    "00-four-steps": ("scatter → replicate → forward", "self.scatter(inputs, kwargs"),
    "00-laptop-passthrough": ("torch.nn.DataParallel device_ids: []",),
    "01-one-device-counter": (),
    "01-one-device-scalar": (),
    "02-ten-rows-four-devices": ("chunk shapes: [[3, 8], [3, 8], [3, 8], [1, 8]]",),
    "02-six-rows-four-devices": ("6 rows on 4 devices -> chunks [2, 2, 2]",),
    "02-mismatched-batches": ("3 entries: [[[3, 2], [1, 2]]",),
    "02-lstm-hidden-state": ("h0 chunks on 2 devices: [[1, 4, 2], [1, 4, 2]]",),
    "02-keyword-missing-argument": ("replica 3: args [[2, 2]], kwargs []",),
    "03-parameters-empty": ("replica.parameters(): []",),
    "03-replica-zero-shares": ("replica 0: weight shares memory True",),
    "03-counter-lost": ("with 2 devices: calls = 0",),
    "03-list-shared": ("seen = [4, 4, 8]",),
    "04-threads": ("replica 0 ran [4, 8] in replica-0",),
    "04-hook-count": ("hook calls in one forward: 4",),
    "04-error-message": ("Caught ValueError in replica 1 on device",),
    "05-gather-concatenates": ("equal to torch.cat of the per-chunk outputs: True",),
    "05-packed-lstm": (),  # lesson 07 runs the fix; lesson 05 only asks
    "05-scalar-loss-shape": ("6 rows on 4 devices: chunks [2, 2, 2] -> shape [3]",),
    "06-gradients-summed": ("| the mean would be",),
    "06-mean-loss-matches": ("batch 10, chunks [3, 3, 3, 1]: max |grad difference| vs the oracle",),
    "06-sum-of-replica-losses": ("every grad = 2.0000 x the one-device grad",),
    "07-state-dict-keys": ("dp.state_dict() keys: ['module.",),
    "07-placement": ("forward: module must have its parameters and buffers on device",),
    "07-plain-tensor-stays": ("plain tensor attribute: cpu",),
    "07-lone-sample-weight": ("'1/12', '1/4']",),
    "07-batchnorm-last-chunk": ("Expected more than 1 value per channel when training",),
    "08-not-model-parallel": ("replica-0: weight [16, 8], 4 of the 12 rows",),
    "08-padding-fine": ("2 devices: [4, 40, 10] -> [4, 40, 20], equal to one device: True",),
    "08-batchnorm-running-mean": ("| on 2 devices: 0.0",),
    "08-custom-parameter": ("MyCustomLayer: gradients equal the one-device oracle's: True",),
    "09-replicate-each-forward": ("2 devices: replicate copied 1,051,648 bytes",),
    "09-replicate-bytes": ("4 devices: replicate copied 3,154,944 bytes = 3 x",),
    "09-modules-per-forward": ("204 new module objects",),
    "10-ddp-averages": ("DDP = mean of ranks",),
    "10-unequal-shards": ("shard sizes [5, 3]",),
    "11-review-nine-rows-scalar": (),
    "11-review-buffer-counter": (),
    "11-review-five-rows-output": ("gather:         output [10, 4]",),
    "13-reduce-others": ("(not defined: only dst receives the result)",),
    "13-send-first": ("rank 1 received 0, from rank 0",),
    "13-ring-bytes": ("4 ranks, ring                   7,200 (1.50 S)",),
    "14-divide-by-steps": ("3.0000 x one device's",),
    "14-dp-reduce-adds": ("micro-step 3: {'replicate': 1, 'reduce-add': 1}",),
    "14-no-sync-allreduces": ("[0, 0, 1] on every rank",),
    "14-forward-outside": ("[1, 1, 1] on every rank",),
    "14-last-partial": ("micro-batch 3 (chunks [2]): 1/6",),
    "16-plain-thread": ("('plain-thread', torch.float32)",),
    "16-enabled-only": ("{'cpu': torch.bfloat16, 'cuda': torch.float16}",),
    "16-overflow-skip": ("inf or NaN found True , weights changed False",),
    "15-adam-state": ("x the parameters",),
    "15-dp-most-memory": ("device 0 holds beyond device 1:",),
    "15-ddp-rank-memory": ("measured: DDP on 2, batch 256, Adam",),
    "16-compression-error": ("bf16, dpcourse's copy",),
    "17-no-sampler": ("no sampler       per epoch: [24, 24] samples trained",),
    "17-set-epoch": ("every epoch repeats epoch 0: True",),
    "17-uneven-no-join": ("Timed out waiting",),
    "17-unused-parameter": ("Expected to have finished reduction in the prior iteration",),
    "17-global-variance": ("'variance': 2.0",),
    # Part III (lessons 18-21): one clue each, from the outputs of their reveals as first built.
    "18-ddp-state-copies": ("bytes per rank, 2 copies",),
    "18-unpadded-all-gather": ("invalid tensor size at index 3",),
    "18-sum-not-mean": ("the weights differ from one-device Adam's: True",),
    "19-reduce-scatter-when": ("predicted: [3, 1, 0] | measured the same on every rank",),
    "19-gradient-bytes": ("ZeRO-2    2,300 |",),
    "19-wire-bytes": ("ZeRO-2  2,640, 2,640, 2,640, 2,640",),
    "20-after-forward": ("after the forward: [0, 0, 0, 0, 0]",),
    "20-bytes-vs-ddp": ("1.500 x DDP's",),
    "20-prefetch-peak": ("with prefetch)",),
    "21-empty-shard": ("(2, 15)   (0, 15)",),
    "21-reshard-gathers": ("backward: AG AG RS AG RS RS",),
    "21-mixed-precision": ("weight inside the forward  bfloat16",),
    "21-load-elsewhere": ("every parameter equals the 3-rank run's after its step 4",),
    "21-zero-owners": ("rank 0: Adam over ['2.weight']",),
}


def asked(code: str) -> list[str]:
    """The ids of the questions a piece of lesson code shows, in order."""
    ids = ASK.findall(code)
    for lesson in ASK_LESSON.findall(code):
        ids += [question.id for question in load_lesson(lesson)]
    return ids


@functools.cache
def questions_of(lesson: str) -> tuple[str, ...]:
    cells = jupytext.read(NOTEBOOKS / "src" / f"{lesson}.py", fmt="py:percent").cells
    return tuple(dict.fromkeys(q for cell in cells if cell.cell_type == "code" for q in asked(cell.source)))


def output_text(output: nbformat.NotebookNode) -> str:
    """What a learner reads in one output: printed text, a result's plain text, an error and its traceback."""
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join([output.ename, output.evalue, *output.get("traceback", [])])
    return output.get("data", {}).get("text/plain", "")


def cell_text(cell: nbformat.NotebookNode) -> str:
    """All a code cell shows, joined as the page shows it: a print can arrive as several stream outputs."""
    return "".join(output_text(output) for output in cell.outputs)


def revealed(code: str) -> tuple[str, ...]:
    """The question ids a piece of lesson code names in ``quiz.reveal(...)``, in order."""
    return tuple(q for call in REVEAL.findall(code) for q in re.findall(r"""["']([\w.-]+)["']""", call))
