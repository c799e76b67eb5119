"""llama.cpp's convert_hf_to_gguf.py, unchanged but for the name of the BPE pre-tokenizer.

Usage: convert_hf_to_gguf.py CONVERTER PRE_TOKENIZER [the converter's arguments ...]

The converter names a byte-level BPE's pre-tokenizer by hashing its tokenization of a test
text against the releases it knows (`get_vocab_base_pre`), and refuses any other tokenizer. The
toolchain's tokenizer is a tiny byte-level BPE of its own that no release shares, so that one
method returns PRE_TOKENIZER, the llama.cpp name of the pre-tokenizer the tokenizer has; every
other step (tensor names and permutations, metadata, vocabulary, merges) is the converter's.
"""

import runpy
import sys
from pathlib import Path


def main():
    converter, pre_tokenizer = Path(sys.argv[1]), sys.argv[2]
    sys.argv = [str(converter)] + sys.argv[3:]
    # The converter imports its package beside it, and gguf-py from its own tree.
    sys.path.insert(0, str(converter.parent))
    sys.path.insert(1, str(converter.parent / "gguf-py"))
    from conversion import base

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre_tokenizer
    runpy.run_path(str(converter), run_name="__main__")


if __name__ == "__main__":
    main()
