"""Every program the README tells a user to run (its `.venv/bin/...`, `console/node_modules/.bin/...`
and bare command names in the "Using it" section) exists once `make setup console` has run: the
README used to suggest `grpcurl`, which nothing installs."""
from __future__ import annotations

import re
import shutil

from services.common.settings import PROJECT_ROOT


def _using_it_commands() -> list[str]:
    readme = (PROJECT_ROOT / "README.md").read_text()
    section = readme.split("## Using it", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    section = re.sub(r"```.*?```", "", section, flags=re.S)
    # inline code that is a whole command line (3+ words; a name such as `buf curl` is not)
    spans = blocks + [" ".join(c.split()) for c in re.findall(r"`([^`]+)`", section) if len(c.split()) >= 3]
    programs = []
    for span in spans:
        for line in span.splitlines():
            for command in re.split(r";|\$\(|\|", line.split("#", 1)[0]):
                words = command.split()
                if words and (len(words) > 1 or "/" in words[0]) and re.fullmatch(r"[\w./-]+", words[0]) and ("/" in words[0] or "." not in words[0]):
                    programs.append(words[0])
    return programs


def test_every_program_the_readme_names_is_installed():
    programs = _using_it_commands()
    assert ".venv/bin/agentfeedback" in programs
    missing = [p for p in programs if not ((PROJECT_ROOT / p).exists() if "/" in p else shutil.which(p))]
    assert not missing, f"the README's 'Using it' names programs nothing installs: {missing}"


def test_the_readme_says_the_cli_needs_the_stack_running_before_it_shows_a_command():
    """A new user ran `agentfeedback feedback list` from "Using it" without the stack and got
    UNAVAILABLE: the section says, before its first command, that `make run` must be running in
    another terminal."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    intro = readme.split("## Using it", 1)[1].split("```", 1)[0]
    assert "`make run`" in intro and "another terminal" in intro, intro
