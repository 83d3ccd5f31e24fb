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


# --- issue 46: written for the reader ------------------------------------------------------------
MAX_POSITIONAL_ARGUMENTS = 3
MAX_CLASS_DOCSTRING_LINES = 40


def our_classes():
    """The names of the classes defined in the package."""
    return {node.name for path in sorted((Path(REPO) / 'mmhvit').rglob('*.py'))
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)}


def unreadable(path: Path, classes):
    """``(what, line)`` of each construction of one of ``classes`` with more than
    MAX_POSITIONAL_ARGUMENTS positional arguments, and of each class docstring over its limit."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = getattr(node.func, 'id', getattr(node.func, 'attr', None))
            if name in classes and len(node.args) > MAX_POSITIONAL_ARGUMENTS:
                found.append((f'{name}() with {len(node.args)} positional arguments',
                              node.lineno))
        elif isinstance(node, ast.ClassDef) and ast.get_docstring(node):
            lines = ast.get_docstring(node).count('\n') + 1
            if lines > MAX_CLASS_DOCSTRING_LINES:
                found.append((f'class {node.name} docstring of {lines} lines', node.lineno))
    return found


def test_the_rules_see_positional_constructors_and_long_class_docstrings(tmp_path):
    doc = '\n'.join(f'    line {i}' for i in range(MAX_CLASS_DOCSTRING_LINES))
    source = tmp_path / 'unread.py'
    source.write_text(f'class Big:\n    """Title.\n{doc}\n    """\n\n\n'
                      'Big(1, 2, 3)\nBig(1, 2, 3, 4)\nBig(1, 2, 3, four=4)\n')
    assert unreadable(source, {'Big'}) == [
        ('class Big docstring of 41 lines', 1),
        ('Big() with 4 positional arguments', MAX_CLASS_DOCSTRING_LINES + 7)]


def test_our_constructors_take_keywords_and_class_docstrings_stay_short():
    classes = our_classes()
    offenders = [f'{path.relative_to(REPO)}:{line}: {what}'
                 for path in python_files() for what, line in unreadable(path, classes)]
    assert not offenders, ('call our classes with at most '
                           f'{MAX_POSITIONAL_ARGUMENTS} positional arguments and keep class '
                           f'docstrings under {MAX_CLASS_DOCSTRING_LINES + 1} lines: '
                           + '; '.join(offenders))
