"""torchao quantization as config components: QAT (prepare/convert) and PTQ, one class per scheme.

Importing this package quiets torchao's import-time lines about CUDA-only extensions on CPU
machines (see `ftune.runtime.torchao_logs`); it must therefore run before the process's first `import torchao`.
"""

from ftune.runtime.torchao_logs import quiet_torchao_import_logs

quiet_torchao_import_logs()

from ftune.checkpointing.quantized import load_quantized, read_quantized, save_quantized  # noqa: E402
from ftune.quantization.fake_quant import enable_fake_quant  # noqa: E402
from ftune.quantization.quantizers import (  # noqa: E402
    QUANTIZERS,
    Int4WeightOnly,
    Int8DynActInt4Weight,
    Int8WeightOnly,
    IntxWeightOnly,
    Quantizer,
    quantizer_from_spec,
)
from ftune.quantization.ranges import require_saved_ranges  # noqa: E402
from ftune.quantization.targets import DECODER_LINEARS  # noqa: E402
from ftune.settings import QuantizeSettings  # noqa: E402

__all__ = [
    "DECODER_LINEARS",
    "QUANTIZERS",
    "QuantizeSettings",
    "Int4WeightOnly",
    "Int8DynActInt4Weight",
    "Int8WeightOnly",
    "IntxWeightOnly",
    "Quantizer",
    "enable_fake_quant",
    "load_quantized",
    "quantizer_from_spec",
    "quiet_torchao_import_logs",
    "read_quantized",
    "require_saved_ranges",
    "save_quantized",
]
