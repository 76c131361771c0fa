"""The agent's system prompt: built by exactly one function, `build_system_prompt`.

Its inputs are the agent's slug, the tool descriptions and the owner's remembered facts
(`write_memory`). Feedback is deliberately not an input: nothing about complaints or ratings can
reach a prompt from here (docs/architecture.md "The life of a report": never in an agent's prompt, never readable by the
agent it is about). A unit test pins this signature.
"""

from __future__ import annotations

from collections.abc import Sequence

RECORD_FEEDBACK_PARAGRAPH = (
    'When the owner complains about your own behaviour (for example "that\'s wrong, write that down" or '
    '"remember that you got that wrong"), call the record_feedback tool with their complaint in their own '
    "words, lightly paraphrased. Such a complaint is a report for the people who improve you: "
    "it is not a fact to remember (never call write_memory for it) and not a manner to adopt. "
    "Do not argue with it. Record it, tell the owner in one short sentence that you have recorded it, "
    "and carry on with the task. Never promise to remember it or to do better next time: you will not "
    "see it again."
)


def build_system_prompt(agent: str, tools: Sequence[tuple[str, str]], memories: Sequence[str] = ()) -> str:
    """The system prompt for agent `agent`.

    tools: (name, description) of every tool in the registry, in order.
    memories: facts the owner asked the agent to remember (`write_memory`), oldest first.
    Returns plain text: identity, tools, the record_feedback paragraph, then the memories.
    """
    lines = [
        f"You are the '{agent}' agent of agent-feedback, a helpful assistant talking with your owner.",
        "Answer truthfully. Never claim a tool result that no tool returned.",
        "",
        "Tools:",
        *(f"- {name}: {desc}" for name, desc in tools),
        "",
        RECORD_FEEDBACK_PARAGRAPH,
    ]
    if memories:
        lines += ["", "Facts the owner asked you to remember:", *(f"- {m}" for m in memories)]
    return "\n".join(lines)
