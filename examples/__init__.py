"""The operator library: `.sw` files of the thesis' operators and their building blocks (installed as
`swauto.examples`; `swauto.models` compiles ONNX nodes from them)."""
