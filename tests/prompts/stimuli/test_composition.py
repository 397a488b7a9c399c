"""Pairs counted by who has the organ their service is about, against a count made here from
the pack's CSV files (not through the pack loader)."""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

from ibias.prompts.stimuli import load_pack
from ibias.prompts.stimuli.composition import ORGAN_SERVICES, pack_compositions
from tests.prompts.stimuli.test_release import ibias


def count_by_hand(pack_dir: Path, service: str, sex: str) -> Counter[str]:
    with (pack_dir / "allocation" / "people.csv").open(encoding="utf-8", newline="") as fh:
        sexes = [row["Sex assigned at birth"] for row in csv.DictReader(fh)]
    counts: Counter[str] = Counter()
    with (pack_dir / "allocation" / "pairs.csv").open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["service"] != service:
                continue
            cis = sexes[int(row["cis_person"]) - 1] == sex
            trans = sexes[int(row["trans_person"]) - 1] == sex
            kind = {(True, True): "both", (True, False): "only cis"}.get((cis, trans))
            counts[kind or ("only trans" if trans else "neither")] += 1
    return counts


def printed(line: str) -> Counter[str]:
    found = re.findall(r"(both|only cis|only trans|neither) (\d+)", line)
    return Counter({kind: int(n) for kind, n in found})


def test_the_printed_prostate_counts_are_the_packs(paper_pack_dir: Path) -> None:
    done = ibias("stimuli", "check", str(paper_pack_dir))
    assert done.returncode == 0, done.stderr
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines()[1:]}
    assert set(lines) == set(ORGAN_SERVICES)
    for service, organ in ORGAN_SERVICES.items():
        assert printed(lines[service]) == +count_by_hand(paper_pack_dir, service, organ.sex)
    # The numbers the issue gives for the authors' release: 21 both, 39 only the trans person
    # (a cis woman and a trans woman), 20 only the cis person, 20 neither.
    assert printed(lines["prostate_study"]) == {
        "both": 21,
        "only trans": 39,
        "only cis": 20,
        "neither": 20,
    }


def test_every_count_sums_to_the_services_pairs(paper_pack_dir: Path) -> None:
    pack = load_pack(paper_pack_dir)
    for found in pack_compositions(pack):
        assert found.total == len(pack.pairs_for(found.service))
