"""KernelBench-style evaluation: kernels for a problem set (generated or given), checked by the harness, scored.

problems -> sources -> harness batch -> records (JSONL, resumable) -> metrics -> table (markdown) and chart (PNG).
"""

from dice_lsp.evaluation.errors import EvaluationError
from dice_lsp.evaluation.metrics import Outcome, Score, deceptions, score_levels
from dice_lsp.evaluation.problems import Problem, find_problems, parse_levels
from dice_lsp.evaluation.records import RecordLog, SampleRecord, read_records
from dice_lsp.evaluation.run import Evaluation, Plan, evaluate, result_settings, summarize
from dice_lsp.evaluation.sources import Generator, Kernel, SolutionFiles

__all__ = ["Evaluation", "EvaluationError", "Generator", "Kernel", "Outcome", "Plan", "Problem", "RecordLog",
           "SampleRecord", "Score", "SolutionFiles", "deceptions", "evaluate", "find_problems", "parse_levels",
           "read_records", "result_settings", "score_levels", "summarize"]
