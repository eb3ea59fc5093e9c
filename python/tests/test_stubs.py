"""The typed stub of the extension (ops_transformer/_core.pyi) matches the
extension: regenerated with nanobind's stubgen, it is the file shipped.
After changing python/src/core_module.cpp, regenerate it with
    PYTHONPATH=<build>/python python -m nanobind.stubgen -m ops_transformer._core -o python/ops_transformer/_core.pyi
"""

import inspect
import pathlib

import pytest

import ops_transformer as ot


def test_stub_matches_the_extension(tmp_path):
    stubgen = pytest.importorskip("nanobind.stubgen")
    generated = tmp_path / "_core.pyi"
    stubgen.main(["-q", "-m", "ops_transformer._core", "-o", str(generated)])
    shipped = pathlib.Path(ot.__file__).with_name("_core.pyi")
    assert shipped.exists(), "the package ships no _core.pyi"
    assert generated.read_text() == shipped.read_text(), \
        "python/ops_transformer/_core.pyi is stale: regenerate it (see this file's docstring)"


def test_public_functions_are_annotated():
    for name in ot.__all__:
        fn = getattr(ot, name)
        if getattr(fn, "__module__", "") == "ops_transformer._core":  # typed by the stub
            continue
        signature = inspect.signature(fn)
        assert signature.return_annotation is not inspect.Signature.empty, name
        for parameter in signature.parameters.values():
            if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                assert parameter.annotation is not inspect.Parameter.empty, f"{name}({parameter.name})"
