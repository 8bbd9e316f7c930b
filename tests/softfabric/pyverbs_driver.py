#!/usr/bin/env python3
# pyverbs_driver.py TESTS_DIR SEED [run_tests.py arguments...]: runs rdma-core's pyverbs tests (their tests/
# directory, as Debian's python3-pyverbs ships it) the way their run_tests.py does, with Python's random module
# seeded (the tests pick random attributes), and prints one line per test: OUTCOME TEST_ID [DETAIL].
# OUTCOME is ok, skip, fail or error; DETAIL is the skip reason or the last line of the failure.
import os
import random
import sys
import unittest
from importlib.machinery import SourceFileLoader

tests_dir, seed = sys.argv[1], int(sys.argv[2])
sys.argv = [os.path.join(tests_dir, 'run_tests.py')] + sys.argv[3:]
sys.path.insert(0, tests_dir)
random.seed(seed)

from args_parser import parser  # noqa: E402 (the tests' own parser, after the path is set)

tests = SourceFileLoader('tests', os.path.join(tests_dir, '__init__.py')).load_module()
parser.parse_args()


class LineResult(unittest.TestResult):
    def _line(self, outcome, test, detail=''):
        detail = detail.strip().splitlines()[-1] if detail.strip() else ''
        print(f'{outcome} {test.id()} {detail}'.rstrip(), flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line('ok', test)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line('skip', test, reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._line('fail', test, self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._line('error', test, self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._line('ok', test, 'expected failure')

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._line('fail', test, 'unexpected success')


suite = unittest.defaultTestLoader.loadTestsFromModule(tests)
result = LineResult()
suite.run(result)
print(f'# ran {result.testsRun}', flush=True)
sys.exit(0)
