"""Build, verify, time and inspect a kernel against its reference, each in worker processes, into one `Report`.

`check` runs one pair in the calling thread, `Run` runs one in the background (cancellable), `check_many` a batch
(`check_each` yields each report as its check ends); `prepare` builds what every build shares before the first check.
A `WorkerPool` keeps workers warm between checks: each caller that wants them warm (the server, a batch, a training
run) owns one and passes it; a check given none starts its workers afresh and keeps nothing.
"""

from dice_lsp.harness.batch import check_each, check_many, prepare
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.options import Options
from dice_lsp.harness.verdict import Parsed, Run, check
from dice_lsp.harness.pool import WorkerPool
from dice_lsp.harness.report import Diagnostic, KernelShare, Report, Stage, Timing, Trial

__all__ = ["Diagnostic", "HarnessError", "KernelShare", "Options", "Parsed", "Report", "Run", "Stage", "Timing",
           "Trial", "WorkerPool", "check", "check_each", "check_many", "prepare"]
