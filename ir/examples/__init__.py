"""Example tile programs, written with the builder; the demo and the tests import them."""

from ir.examples.matmul import matmul as matmul
from ir.examples.packed_weights import pack_weights as pack_weights
from ir.examples.packed_weights import pack_weights_program as pack_weights_program
from ir.examples.quantized_matmul import quantized_matmul as quantized_matmul
from ir.examples.register_dequant_matmul import (
    register_dequant_matmul as register_dequant_matmul,
)
from ir.examples.softmax import row_softmax as row_softmax
from ir.examples.vector_add import vector_add as vector_add
