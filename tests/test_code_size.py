"""The size rules of the package and tools (issue 25): no file over 500 lines, no function over
60, so that a reader finds one idea per file and per function."""
import ast
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.unit

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60


def python_files():
    for folder in ('mmhvit', 'tools'):
        yield from sorted((Path(REPO) / folder).rglob('*.py'))


def oversized(path: Path):
    """``(what, lines)`` of the file and of each function in it over its limit."""
    text = path.read_text()
    found = []
    if text.count('\n') > MAX_FILE_LINES:
        found.append(('file', text.count('\n')))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append((f'function {node.name}', lines))
    return found


def test_the_rules_see_an_oversized_file_and_function(tmp_path):
    body = '\n'.join(f'    x{i} = {i}' for i in range(MAX_FUNCTION_LINES))
    source = tmp_path / 'big.py'
    source.write_text('def long():\n' + body + '\n' + '\n' * MAX_FILE_LINES)
    assert oversized(source) == [('file', MAX_FILE_LINES + MAX_FUNCTION_LINES + 1),
                                 ('function long', MAX_FUNCTION_LINES + 1)]


def test_no_file_or_function_in_the_package_and_tools_is_over_its_limit():
    offenders = [f'{path.relative_to(REPO)}: {what} has {lines} lines'
                 for path in python_files() for what, lines in oversized(path)]
    assert not offenders, (f'over {MAX_FILE_LINES} lines a file or {MAX_FUNCTION_LINES} a '
                           'function: ' + '; '.join(offenders))
