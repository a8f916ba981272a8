"""What a task needs to know about its data, without the data: `DataFacts`.

A kind's data builder (`transformer.data.sources`) reports them next to the pipeline it builds;
`--mode=bench`, which reads no dataset, has each task derive them from the config
(`facts_from_config` in `transformer.tasks`). Tasks read only these facts, so this module
imports neither TensorFlow nor the pipeline.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

# Token ids below this are pad (0), bos (1) and eos (2) for both tokenizers; random inputs and
# masking draw regular tokens from here up.
FIRST_REGULAR_ID = 3


@dataclasses.dataclass(frozen=True)
class DataFacts:
  """The data's vocabulary, special ids, labels and image shape.

  `vocab_size` counts the token ids the data holds (the tokenizer's vocabulary; 0 for images);
  a task may add ids of its own (masked LM's [MASK]). `byte_lengths` (`[vocab_size]` int32, the
  UTF-8 bytes each id stands for) gives bits per byte, `tokenizer` turns ids back into text
  (BLEU); both are None without a dataset.
  """
  vocab_size: int = 0
  pad_id: int = 0
  bos_id: int = 1
  eos_id: int = 2
  num_classes: int = 0  # classification: labels 0 .. num_classes - 1; 0 = no labels
  image_shape: tuple[int, int, int] = (0, 0, 0)  # (height, width, channels); 0 = no images
  byte_lengths: Optional[np.ndarray] = dataclasses.field(default=None, compare=False,
                                                         repr=False)
  tokenizer: Any = dataclasses.field(default=None, compare=False, repr=False)

  @classmethod
  def of_tokenizer(cls, tokenizer, **facts) -> DataFacts:
    """The facts a tokenizer (`transformer.data.tokenizers`) reports, plus `facts`."""
    return cls(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
               bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id,
               byte_lengths=tokenizer.byte_lengths, tokenizer=tokenizer, **facts)
