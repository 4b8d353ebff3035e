"""DeepSpeed trainer: prefix-tree merged CISPO on the ordered topic.

forge.train → samples checked → each call's full token sequence → prefix-tree rows → forward
and backward row by row → one optimizer step → a TrainStep to forge.metrics, a policy version
to forge.policy and a checkpoint on disk. Each module is marked pure (no Kafka, network, files,
processes or collectives) or I/O.

Start-up:
- launch — how the trainer is started with N data-parallel ranks on this machine (pure)
- rank_launcher — torchrun with SIGTERM passed on to the ranks as a stop (I/O: processes)
- stop_request — SIGTERM recorded as a stop the ranks agree on between steps (I/O: signals)
- config — trainer settings, from the config file and environment (I/O)
- outputs — where a run writes: its topics and directories, from its input topic (pure)
- base_model — the initial policy, resolved once to a local model directory (I/O: files, Hub)
- distributed — DeepSpeed set-up and the ranks' collective over torch.distributed (I/O)

Input:
- sample_source — ordered samples from the train topic, resumable at an offset (I/O: Kafka)
- shared_source — rank 0 reads the topic and sends each batch to the other ranks (I/O)
- sample_check — whether a sample can be trained and, if not, why (pure)

A step:
- sequences — delta-encoded trajectories back to every call's full token sequence (pure)
- prefix_tree — prefix-tree packing of token sequences (pure)
- tree_forward — per-token log-probs of completion tokens in one packed tree pass (pure)
- losses — the policy-loss variants (cispo, tis, icepop) behind one signature (pure)
- diagnostics — off-policy diagnostics: importance ratios and k3 KL (pure)
- data_parallel — which rank trains which row; collectives behind a protocol (pure)
- batch_loss — one batch's gradients, row by row, normalised over the whole batch
  (pure over the ``Collective`` it is handed)
- finite_step — AdamW that refuses a step whose gradient norm is not finite (pure)

Output:
- timing — where a step's wall time goes, phase by phase (pure; reads the clock)
- step_record — a step's TrainStep record from what the step measured (pure)
- policy_export — policy versions as self-contained model directories (I/O: files)
- checkpoints — checkpoints a kill cannot leave half-committed (I/O: files, collectives)
- service — the trainer loop: samples in, steps, policy versions and records out (I/O)
"""
