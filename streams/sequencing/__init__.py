"""Sequencing: scored trajectories → forge.train in windowed-FIFO order.

- live_sequencer — the one fenced, transactional writer of forge.train (I/O: Kafka)
- sequencer — facts applied to the windowed FIFO in event-time order (pure)
- windowed_fifo — the windowed FIFO over the generation queue (pure)
- recent_keys — what was applied, remembered for a horizon of event time (pure)
- adaptive_window — the window set from completion times and the trainer's pace (pure)
"""
