"""What generates: one interface, several backends, and the policy's tokenizer.

- engine — the interface every engine backend implements, and what it returns (pure)
- embedded_engine — an in-process transformers engine with micro-batching (I/O: weights)
- vllm_engine — vLLM's OpenAI server over HTTP, with exact token ids and log-probs (I/O)
- vllm_server — the vLLM server process a run starts, stops and restarts (I/O: processes)
- engine_fleet — several engines as one: routed by affinity and load, failures routed around
  (I/O through its engines)
- routing — which engine serves a call: cache affinity first, load second (pure)
- chat_tokenizer — chat templates and tokenization from a model directory (I/O: reads it)
- encode_batches — prompt tokenization off the event loop, in batches on a thread (pure)
"""
