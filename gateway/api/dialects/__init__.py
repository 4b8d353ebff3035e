"""The dialects beside Chat Completions, each a thin translation to and from the one chat call
the gateway records (``gateway.call.call_input.ChatCall``).

- messages_request — Anthropic Messages requests validated and translated (pure)
- messages_answer — the Messages ``message`` body and its server-sent events (pure)
- responses_request — OpenAI Responses requests validated and translated (pure)
- responses_answer — the ``response`` object and the Responses stream events (pure)
"""
