"""Bad-input cases of `ftune export gguf --imatrix` and `ftune export imatrix`: importance matrices.

Run by bad_inputs.py inside its own namespace (`_c`, `CASES`, `SETUPS`, `_write` come from there), so
the catalogue stays one list. The matrices are written small (one entry), so each case reads a few
bytes and, at most, the tiny checkpoint.
"""
# ruff: noqa: F821  (names of bad_inputs.py, which runs this file in its namespace)

# fmt: off
_GGUF = ('export', 'gguf', '{ckpt}', '{tmp}/m.gguf')
_IMATRIX = ('export', 'imatrix', '{ckpt}')
CASES += [  # noqa: F821
    _c('imatrix-type-unchanged', 'importance matrices', (*_GGUF, '--type', 'q8_0', '--imatrix', '{tmp}/im.gguf'), 'which an importance matrix does not change', '--imatrix was given with', '--type q8_0', 'Use it with q6_k, q5_k_m, q5_k_s, q4_k_m, q4_k_s or q4_0, or drop --imatrix', 'imatrix_one_entry'),  # noqa: F821
    _c('imatrix-other-model', 'importance matrices', (*_GGUF, '--type', 'q4_0', '--imatrix', '{tmp}/im.gguf'), 'The file was made for another model', 'importance matrix {tmp}/im.gguf: entry blk.0.attn_q.weight', 'has 100 values (shape (100,)) but the model', 'make one for this model with `ftune export imatrix`', 'imatrix_one_entry'),  # noqa: F821
    _c('imatrix-old-dat-format', 'importance matrices', (*_GGUF, '--type', 'q4_0', '--imatrix', '{tmp}/old.dat'), 'is not a GGUF file', 'importance matrix {tmp}/old.dat', "llama.cpp's older .dat format?", 'llama-imatrix --in-file old.dat -o old.gguf', 'imatrix_dat'),  # noqa: F821
    _c('imatrix-model-file', 'importance matrices', (*_GGUF, '--type', 'q4_0', '--imatrix', '{tmp}/model.gguf'), 'is a GGUF file but not an importance matrix', '{tmp}/model.gguf', "general.type is 'model', want 'imatrix'", 'Pass the file llama-imatrix or `ftune export imatrix` wrote', 'imatrix_model_file'),  # noqa: F821
    _c('imatrix-output-not-gguf', 'importance matrices', (*_IMATRIX, '{tmp}/m.dat', '--text', '{tmp}/calib.txt'), 'does not end in .gguf', 'output', "'{tmp}/m.dat'", 'Give a file name such as m.gguf', 'imatrix_text'),  # noqa: F821
    _c('imatrix-text-missing', 'importance matrices', (*_IMATRIX, '{tmp}/m.gguf', '--text', '{tmp}/none.txt'), 'is not a file', '--text', "'{tmp}/none.txt'", 'Pass a UTF-8 calibration text'),  # noqa: F821
    _c('imatrix-chunk-too-small', 'importance matrices', (*_IMATRIX, '{tmp}/m.gguf', '--text', '{tmp}/calib.txt', '--chunk-size', '8'), 'is below 16 tokens', '--chunk-size', '8', 'give 16 or more (512 is usual)', 'imatrix_text'),  # noqa: F821
    _c('imatrix-text-too-short', 'importance matrices', (*_IMATRIX, '{tmp}/m.gguf', '--text', '{tmp}/calib.txt'), 'fewer than one chunk of 512', 'calibration text {tmp}/calib.txt', 'has 14 tokens', "Give a longer text (llama.cpp's users take a few hundred kB) or a smaller --chunk-size", 'imatrix_text'),  # noqa: F821
    _c('imatrix-jsonl-not-chats', 'importance matrices', (*_IMATRIX, '{tmp}/m.gguf', '--text', '{tmp}/calib.jsonl', '--chunk-size', '16'), 'a .jsonl calibration file holds chat records', '{tmp}/calib.jsonl:2', "this line has keys ['input', 'output']", 'or a plain text file (any other suffix)', 'imatrix_jsonl'),  # noqa: F821
]
# fmt: on


def _imatrix_one_entry(tmp, ckpt):
    """A valid importance matrix with one entry whose 100 columns fit no tensor of the tiny model."""
    import numpy as np  # numpy and gguf: only when the case runs

    from ftune.checkpointing.gguf.imatrix import ImportanceMatrix, write_imatrix

    matrix = ImportanceMatrix(chunk_count=1, chunk_size=16)
    matrix.sums["blk.0.attn_q.weight"] = np.ones((1, 100), dtype=np.float32)
    matrix.counts["blk.0.attn_q.weight"] = np.ones(1, dtype=np.float32)
    write_imatrix(tmp / "im.gguf", matrix)


def _imatrix_model_file(tmp, ckpt):
    """A GGUF file of general.type 'model' (no tensors): what a model export writes, not a matrix."""
    import gguf

    writer = gguf.GGUFWriter(tmp / "model.gguf", "llama")
    writer.add_type("model")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


SETUPS.update(  # noqa: F821
    {
        "imatrix_one_entry": _imatrix_one_entry,
        "imatrix_dat": lambda tmp, ckpt: _write(tmp / "old.dat", b"\x02\x00\x00\x00blk.0.attn_q.weight"),
        "imatrix_model_file": _imatrix_model_file,
        "imatrix_text": lambda tmp, ckpt: _write(tmp / "calib.txt", "Rewrite the date 2036-10-28.\n"),
        "imatrix_jsonl": lambda tmp, ckpt: _write(
            tmp / "calib.jsonl",
            '{"messages": [{"role": "user", "content": "hi"}]}\n{"input": "a", "output": "b"}\n',
        ),
    }
)
