"""The prompt template functions against Python itself: PROMPT_TEMPLATE extraction must give
what executing the script gives, and formatting must give what str.format gives."""
import ast
import warnings

import pytest

from kernelllm import _native

# kernelllm.py-shaped sources (our own text): docstrings, other strings holding quotes and
# look-alike assignments, escapes, raw strings, implicit concatenation.
SCRIPTS = [
    '"""Doc.\n\nPROMPT_TEMPLATE = "decoy"\n"""\nimport sys\n\nEXAMPLE = """\nclass M:\n    \\"\\"\\"d\\"\\"\\"\n"""\n\n'
    'PROMPT_TEMPLATE = """\n<|begin_of_text|>Write Triton.\n```\ndef f():\n    \\"\\"\\"doc\\"\\"\\"\n'
    '    return "s", \'c\'\n```\n\nThe module:\n```\n{}\n```\nOnly ModelNew, NO testing code!\n"""\n\n'
    'class KernelLLM:\n    PROMPT_TEMPLATE = "indented, not module level"\n',
    "PROMPT_TEMPLATE = 'tab\\there\\nnew \\x41\\101 \\u00e9 \\U0001F600 \\\\ \\q'\n",
    'PROMPT_TEMPLATE = r"""raw \\n {} \\""" end"""\n',
    'PROMPT_TEMPLATE = (\n    "part one\\n"  # comment\n    r\'\\d+ \'\n    """{}"""\n)\n',
    "PROMPT_TEMPLATE: str = 'a' \\\n    \"b {}\"\nPROMPT_TEMPLATE = 'last {} wins'\n",
    "import os\r\nPROMPT_TEMPLATE = '''crlf\r\n{}\r\n'''\r\n",
]


def python_value(source: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        module = ast.parse(source)
    value = None
    for node in module.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "PROMPT_TEMPLATE" for t in targets):
            value = ast.literal_eval(node.value)
    return value


@pytest.mark.parametrize("source", SCRIPTS)
def test_extraction_equals_python(source):
    expected = python_value(source)
    assert expected is not None
    assert _native.extract_prompt_template(source) == expected


def test_missing_template_is_file_not_found_error():
    with pytest.raises(FileNotFoundError, match="PROMPT_TEMPLATE"):
        _native.extract_prompt_template("X = 1\n", "m/kernelllm.py")


@pytest.mark.parametrize("source", ["PROMPT_TEMPLATE = f'{x}'\n", "PROMPT_TEMPLATE = 'a'.strip()\n",
                                    "PROMPT_TEMPLATE = '''open\n"])
def test_unparsable_template_is_value_error(source):
    with pytest.raises(ValueError, match="kernelllm.py:1"):
        _native.extract_prompt_template(source)


@pytest.mark.parametrize("template", ["A {} B", "{{x}} {0} {{", "}}{}{{", "{0}{0}", "\n<|begin_of_text|>\n```\n{}\n```\n"])
@pytest.mark.parametrize("code", ["", "x = {'a': 1}", "f'{y}' }}{{ {0} {}", "é\n\t"])
def test_format_equals_str_format(template, code):
    assert _native.format_triton_prompt(template, code) == template.format(code)


@pytest.mark.parametrize("template", ["{code}", "{} {}", "{1}", "{:x}", "a } b", "a { b"])
def test_format_rejects_what_str_format_rejects(template):
    with pytest.raises(Exception):
        template.format("c")
    with pytest.raises(ValueError):
        _native.format_triton_prompt(template, "c")


@pytest.mark.parametrize("template", ["{0!r}", "{!s}", "{0:>8}", "no field"])
def test_format_rejects_conversions_specs_and_no_field(template):
    # Python accepts these; a Triton template never needs them, and a template without the
    # field would silently drop the user's module.
    template.format("c")
    with pytest.raises(ValueError):
        _native.format_triton_prompt(template, "c")


def test_builtin_template_shape():
    t = _native.builtin_prompt_template()
    assert t.startswith("\n<|begin_of_text|>")
    assert t.count("{}") == 1 and "{{" not in t
    assert t.index("def add_kernel(") < t.index("class ModelNew(") < t.index("{}")
    assert "NO testing code" in t[t.index("{}"):]
    assert t.format("CODE") == _native.format_triton_prompt(t, "CODE")
