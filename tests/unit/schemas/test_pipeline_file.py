"""The pipeline file's domains: defaults filled in, shares checked, every problem one line."""

from __future__ import annotations

import pytest

from schemas.errors import ConfigError
from schemas.pipeline_file import DEFAULT_DOMAIN, read_pipeline_file


def parsed(tmp_path, text: str):
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return read_pipeline_file(path)


def test_without_domains_there_is_one_default_domain_with_the_whole_mix(tmp_path):
    domains = parsed(tmp_path, "group_timeout_s: 60\n").resolved_domains()
    assert list(domains) == [DEFAULT_DOMAIN]
    assert domains[DEFAULT_DOMAIN].share == 1.0
    assert domains[DEFAULT_DOMAIN].group_timeout_s == 60


def test_a_domain_overrides_what_it_names_and_inherits_the_rest(tmp_path):
    text = (
        "rewards: {speed_weight: 0.0}\ngroup_timeout_s: 60\n"
        "domains:\n"
        "  math: {share: 0.25, group_size: 8, rewards: {outcome_weight: 2.0}}\n"
        "  chat: {share: 0.75, group_timeout_s: 30, truncation: {enabled: true}}\n"
    )
    domains = parsed(tmp_path, text).resolved_domains()
    assert domains["math"].rewards.outcome_weight == 2.0
    assert domains["math"].rewards.speed_weight == 0.1  # a domain's rewards section is whole
    assert (domains["math"].group_size, domains["math"].group_timeout_s) == (8, 60)
    assert domains["chat"].rewards.speed_weight == 0.0
    assert domains["chat"].truncation.enabled and not domains["math"].truncation.enabled
    assert (domains["chat"].share, domains["chat"].group_timeout_s) == (0.75, 30)


def test_domains_without_shares_share_equally(tmp_path):
    domains = parsed(tmp_path, "domains: {a: {}, b: {}, c: {}, d: {}}\n").resolved_domains()
    assert [d.share for d in domains.values()] == [0.25] * 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("domains: {a: {share: 0.5}, b: {share: 0.4}}\n", r"shares must add up to 1 \(.*0\.9\)"),
        ("domains: {a: {share: 0.5}, b: {}}\n", r"every domain a share, or none"),
        ("domains: {Math: {}}\n", r"domain name 'Math' must match"),
        ("domains: {a: {shares: 1}}\n", r"domains\.a\.shares: Extra inputs"),
        ("item_timeout_s: 60\ndomains: {a: {group_timeout_s: 90}}\n",
         r"item_timeout_s \(60\) must be at least group_timeout_s \(90\) of domain a"),
        ("tool_rewards: {error_pattern: '(unclosed'}\n", r"error_pattern: .*not a regular"),
        ("tool_rewards: {used_result: .nan}\n", r"used_result must be a finite number"),
    ],
)  # fmt: skip
def test_a_bad_domains_section_is_one_line_naming_it(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parsed(tmp_path, text)
    assert "\n" not in str(caught.value)
