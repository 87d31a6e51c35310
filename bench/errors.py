"""Errors that the CLI turns into a clear message and exit code 2."""


class BenchError(Exception):
    """A user-facing error: bad input, missing data, impossible configuration."""


class UnknownNameError(BenchError, KeyError):
    def __init__(self, kind: str, name: str, valid):
        self.kind, self.name, self.valid = kind, name, sorted(valid)
        super().__init__(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(self.valid)}")

    def __str__(self):  # KeyError would quote the message
        return self.args[0]


class DivergedError(RuntimeError):
    """Training produced a non-finite loss; the harness records the run as failed."""


class MethodFailedError(BenchError):
    """A method cannot produce a posterior on this data (e.g. a degenerate subnetwork); the
    harness records the cell as failed and goes on with the grid. Outside the harness it is a
    user-facing error like any other :class:`BenchError`."""


class InvalidPredictiveError(RuntimeError):
    """A method's ``predict`` returned a predictive that cannot be scored as it is: a wrong shape
    (batch, class axis, pixels, targets), probabilities outside [0, 1] or rows not summing to 1,
    a negative variance (``bench.harness.check_predictive``); the harness records the cell as failed."""
