import pytest

from insub_hf.evaluation.report import paired_differences, paired_table, spread_against_chance, spread_table
from insub_hf.evaluation.results import ComparisonRow, CorruptionMetrics, MethodResults, Metrics


def _row(method, seed, accuracy, ece, nll, auroc):
    name = {"baseline": "Baseline", "insub": "InSub (M=5)"}[method]
    ood = {"msp": auroc, "knn": auroc - 0.1}
    if method == "insub":
        ood["head_spread"] = auroc - 0.2

    def corrupted(accuracy, ece):
        return CorruptionMetrics(accuracy, ece, ece, auroc_msp=0.5, auroc_knn=0.5)

    results = MethodResults(
        members=1, test=Metrics(accuracy, nll, ece, ece, nll / 4), ood={"mnist": ood},
        # two severities: the paired corruption numbers average them
        corruption_mean={"1": corrupted(accuracy - 0.1, ece), "5": corrupted(accuracy - 0.3, 2 * ece)},
    )
    return ComparisonRow(name, method, 5 if method == "insub" else None, seed, results)


ROWS = [
    _row("baseline", 0, 0.86, 0.050, 0.40, 0.70), _row("insub", 0, 0.87, 0.040, 0.41, 0.72),
    _row("baseline", 1, 0.85, 0.060, 0.42, 0.71), _row("insub", 1, 0.86, 0.030, 0.43, 0.69),
    _row("baseline", 2, 0.84, 0.055, 0.41, 0.73), _row("insub", 2, 0.83, 0.045, 0.40, 0.74),
]


def test_paired_differences_against_a_hand_computation():
    cells = paired_differences(ROWS)["InSub (M=5)"]
    acc = cells["Acc"]  # in points: +1, +1, -1
    assert acc["per_seed"] == pytest.approx({0: 1.0, 1: 1.0, 2: -1.0})
    assert acc["mean"] == pytest.approx(1 / 3)
    assert acc["std"] == pytest.approx(((2 * (2 / 3) ** 2 + (4 / 3) ** 2) / 2) ** 0.5)  # ddof 1
    assert acc["better_on"] == [0, 1] and acc["seeds"] == 3
    ece = cells["ECE"]  # lower is better: -1.0, -3.0, -1.0 points
    assert ece["per_seed"] == pytest.approx({0: -1.0, 1: -3.0, 2: -1.0})
    assert ece["better_on"] == [0, 1, 2]
    nll = cells["NLL"]  # +0.01, +0.01, -0.01
    assert nll["per_seed"] == pytest.approx({0: 0.01, 1: 0.01, 2: -0.01}) and nll["better_on"] == [2]
    assert cells["AUROC mnist MSP"]["per_seed"] == pytest.approx({0: 2.0, 1: -2.0, 2: 1.0})
    assert cells["AUROC mnist k-NN"]["per_seed"] == pytest.approx({0: 2.0, 1: -2.0, 2: 1.0})
    assert "AUROC mnist entropy" not in cells  # a score no row has
    assert cells["Corr. Acc"]["per_seed"] == pytest.approx({0: 1.0, 1: 1.0, 2: -1.0})  # (-0.1 - 0.3) / 2 cancels
    assert cells["Corr. ECE"]["per_seed"] == pytest.approx({0: -1.5, 1: -4.5, 2: -1.5})  # 1.5 x the ECE change
    assert "Baseline" not in paired_differences(ROWS)


def test_paired_table_states_the_signs_per_seed():
    table = paired_table(paired_differences(ROWS), ROWS)
    assert "| Method - Baseline | Acc | ECE | TACE | NLL | Brier | Corr. Acc | Corr. ECE | AUROC mnist MSP | AUROC mnist k-NN |" in table
    assert "AUROC" not in paired_table(paired_differences(ROWS), ROWS, ood=False)
    assert paired_table(paired_differences(ROWS), ROWS, ood=True).startswith("| Method - Baseline | AUROC mnist MSP |")
    assert "+0.33 ± 1.15 (+1.00, +1.00, -1.00): better on 2/3" in table
    assert "-1.67 ± 1.15 (-1.00, -3.00, -1.00): better on all seeds" in table
    assert "better on 1/3" in table
    two_seeds = [row for row in ROWS if row.seed != 2]  # two seeds give signs, no spread
    assert "+1.00 (+1.00, +1.00): better on all seeds" in paired_table(paired_differences(two_seeds), two_seeds)
    assert "±" not in paired_table(paired_differences(two_seeds), two_seeds)


def test_rows_without_a_baseline_of_their_seed_are_skipped():
    rows = [ROWS[0], ROWS[1], _row("insub", 7, 0.9, 0.01, 0.3, 0.9)]
    acc = paired_differences(rows)["InSub (M=5)"]["Acc"]
    assert acc["per_seed"] == pytest.approx({0: 1.0}) and acc["std"] is None


def test_the_head_spread_is_read_against_chance_per_seed():
    spread = spread_against_chance(ROWS)
    assert list(spread) == ["InSub (M=5)"]  # the baseline (M=1) has no spread
    cell = spread["InSub (M=5)"]["mnist"]  # 72 - 20, 69 - 20, 74 - 20 = 52, 49, 54
    assert cell["per_seed"] == pytest.approx({0: 52.0, 1: 49.0, 2: 54.0}) and cell["better_on"] == [0, 2]
    table = spread_table(spread)
    assert "| Head spread AUROC (%) vs 50 | mnist |" in table
    assert "51.7 (52.0, 49.0, 54.0): above chance on 2/3" in table
