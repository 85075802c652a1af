"""The larbin.conf reader: text in, one frozen, typed :class:`Config` out.

The format is Larbin 2.6's, read line by line:

* ``key value...``: a key, then its value words, separated by whitespace.
* ``key`` alone: a switch, which turns the option on.  A switch also takes an
  explicit ``true``/``false`` (``yes``/``no``, ``on``/``off``, ``1``/``0``),
  which is how an option that defaults to on is turned off.
* ``#``: a word that begins with ``#`` starts a comment, on a line of its own
  or after a value (``waitDuration 2  # seconds``).  A ``#`` inside a word is
  kept, so ``http://a.example/#top`` stays a URL.
* Blocks: ``forbiddenExtensions``, ``limitToDomain``, ``specificSet`` and
  ``dynamicPages`` take every following word, over as many lines as needed,
  up to the word ``end``.
* Repetition: ``startUrl``, ``dnsServers``, ``analyzer`` and the blocks may
  appear several times and accumulate (``startUrl`` may also carry several
  URLs on a line; a ``startUrl`` or ``dnsServers`` line without a value is
  an error).  Any other key given twice is an error naming both lines: a
  configuration in which a later line silently wins is a configuration
  nobody reads.
* Key names: matched case-sensitively, as Larbin did; a key whose spelling
  differs only by case (``useragent``) is accepted as the same key, and so is
  the Config attribute name (``wait_duration``), which reads naturally after
  ``--set``.  Anything else is an unknown key, reported with the closest real
  key (difflib) as a suggestion.

Overrides (``--set KEY=VALUE`` on the command line) come as ``(key, value)``
pairs and replace the file's value, list keys included (``--set
startUrl="http://a/ http://b/"``); for a list key the value's words are the
items, no ``end`` needed.  Extra start URLs (``--seed URL``) are added to the
file's ``startUrl`` instead.  Both are checked exactly as file lines are, and
their errors are located as ``--set:N`` / ``--seed:N`` (the N-th one given).

Every problem raises :class:`ConfigError`, whose ``str()`` is one line naming
the file, the line and the key::

    larbin.conf:12: waitDuraton: unknown key (did you mean waitDuration?)
    larbin.conf:7: pagesConnexions: expected an integer in 1..100000, got 'abc'
    --set:1: outputMode: expected one of none, save, mirror, stats, warc or 0..4, got 'html'
    larbin.conf: cannot read: No such file or directory

``outputMode`` takes a name or Larbin-style number: 0 ``none``, 1 ``save``,
2 ``mirror``, 3 ``stats``, 4 ``warc``.  Times are seconds and take fractions
(``waitDuration 0.2``).  ``startUrl`` values are kept as written (the engine
normalizes them) but must look like ``http://`` or ``https://`` URLs.

Every number has a range (``low..high`` for integers, ``[low, high]`` or
``(low, high]`` for seconds), so no value can overflow a timer or make a
crawl that never ends; nan and inf are refused.  The ranges are written next
to their keys in the shipped larbin.conf, and in docs/configuration.md.

Secrets are never shown: an error message quotes ``httpToken`` as ``***``
and any URL's password as ``***`` (``redis://:***@host``; larbin_py.redact),
and so does ``format_config(config, redact=True)`` (``--print-config``),
``zkAuth``'s password included.

:class:`Config` validates itself on construction, so :meth:`Config.replace`
and direct construction get the same range checks as the file (without a
line number to report).  :func:`format_config` renders a Config back to
larbin.conf text that :func:`parse_config_text` reads to an equal Config.

The modules: :mod:`.schema` declares every key once, as a field of
:class:`Config` (its type, key, range, default and one-line description);
:mod:`.keys` holds the key types (how a value is read, checked, written
and described) and :mod:`.values` the value syntaxes beyond a word or a
number (DNS servers, ZooKeeper); :mod:`.text` reads and writes larbin.conf
text; :mod:`.reference` makes docs/configuration.md from the schema
(``python -m larbin_py.config --markdown``); :mod:`.errors` the errors.

May import the policy modules (``redact``, ``frontier.addresses``) and the
vocabularies of the edge it checks values against (``net.choices``,
``net.dynamic.parse_rule``); three keys import a room when a value needs
checking: ``redisUrl`` the distributed mode's URL parser (never for an
empty value or ``auto``: a single-process crawl does not import
larbin_py.distributed), ``analyzer`` the analysis stage's, ``httpHosts``
the web server's host check.  Never the engine, the outputs, the crawl
state, the command line, the demo or the synthetic web
(tests/test_imports.py checks it).
"""

from .errors import ConfigError
from .keys import OUTPUT_MODES
from .schema import (
    DEFAULT_FORBIDDEN_EXTENSIONS,
    DEFAULT_USER_AGENT,
    KEYS,
    RESOLV_CONF,
    Config,
    default_analysis_workers,
    read_resolv_conf,
    replicas_for,
    system_dns_servers,
)
from .text import DEMO_CONFIG_TEXT, demo_config, format_config, load_config, parse_config_text
from .values import ZkAuth, check_zk_hosts, check_zk_path

__all__ = [
    "Config",
    "ConfigError",
    "DEFAULT_FORBIDDEN_EXTENSIONS",
    "DEFAULT_USER_AGENT",
    "DEMO_CONFIG_TEXT",
    "KEYS",
    "OUTPUT_MODES",
    "RESOLV_CONF",
    "ZkAuth",
    "check_zk_hosts",
    "check_zk_path",
    "default_analysis_workers",
    "demo_config",
    "format_config",
    "load_config",
    "parse_config_text",
    "read_resolv_conf",
    "replicas_for",
    "system_dns_servers",
]
