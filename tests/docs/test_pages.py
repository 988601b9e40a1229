"""Every command a page shows runs (pages.py says how): README.md, the guides, Getting started, Tasks and Coming from
TRL, each block as a user types it, on the tiny random model through $EVOTUNE_BUILTIN_MODEL. A block that cannot run
here is marked on its page with the reason, and the count of those is printed. A wrong flag planted in a guide fails
the run."""

from __future__ import annotations

from collections import Counter

import pytest
from pages import PAGES, ROOT, RUN, blocks, run_page


def test_every_block_runs_is_a_file_or_says_why_it_cannot_run_here(capsys):
    """Parsed only (the fast tier): each block is run, written or marked with its reason, and the counts printed."""
    every = [block for page in PAGES for block in blocks(page)]
    unmarked = [f"{block.where} ({block.language})" for block in every
                if block.file is None and block.not_run is None and block.language not in RUN]
    assert not unmarked, f"blocks neither run, written nor marked <!-- not run here: WHY -->: {unmarked}"
    assert all(block.not_run for block in every if block.not_run is not None), "a marker without its reason"
    skipped = [block for block in every if block.not_run is not None]
    ran = len(every) - len(skipped)
    with capsys.disabled():
        print(f"\npages' code blocks: {len(every)} on {len(PAGES)} pages; {ran} run or written; {len(skipped)} not "
              "run here:")
        for reason, count in Counter(block.not_run for block in skipped).most_common():
            print(f"  {count} x {reason}")
    assert ran >= 20 and len(skipped) <= 12, (ran, len(skipped))  # most of what the pages show runs


@pytest.mark.slow  # minutes of real commands on the tiny model: the engine tier
@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_the_pages_commands_run_as_written(page, tiny_model_dir, tmp_path):
    """Each page in a folder of its own (a checkout), after the pages it says it builds on."""
    ran, _ = run_page(page, tmp_path / "checkout", tiny_model_dir)
    assert ran or all(block.not_run for block in blocks(page))


@pytest.mark.slow
def test_a_wrong_flag_planted_in_a_guide_fails_the_run(tiny_model_dir, tmp_path):
    guide = (ROOT / "docs" / "guides" / "your-own-task.md").read_text()
    assert "evotune eval runs/my_task\n" in guide
    planted = tmp_path / "your-own-task.md"
    planted.write_text(guide.replace("evotune eval runs/my_task\n", "evotune eval runs/my_task --no-such-flag\n"))
    with pytest.raises(AssertionError, match=r"your-own-task.md:\d+: the block exited with 2(.|\n)*--no-such-flag"):
        run_page(planted, tmp_path / "planted", tiny_model_dir)
