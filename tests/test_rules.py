from larbin_py.rules import UrlRules
from larbin_py.url import host_of


def test_host_of():
    assert host_of("http://a.test/x") == "a.test"
    assert host_of("http://u:p@a.test:81/x") == "a.test"
    assert host_of("https://[::1]:8443/") == "[::1]"
    assert host_of("http://a.test?q") == "a.test"


def test_depth_rules_larbin():
    r = UrlRules(depth_in_site=2)
    assert r.admit("http://a/x", None, 0) == 2  # seed
    assert r.admit("http://a/y", "a", 2) == 1
    assert r.admit("http://a/z", "a", 0) == "tooDeep"
    assert r.admit("http://b/", "a", 1) == 0  # external, no depthBySite
    by_site = UrlRules(depth_in_site=2, depth_by_site=True)
    assert by_site.admit("http://b/", "a", 0) == 2  # another site starts again
    assert by_site.admit("http://a/q", "a", 0) == "tooDeep"
    # a redirect keeps its page's depth
    assert r.admit("http://a/moved", "a", 0, redirect=True) == 0


def test_external_lock_and_domain():
    r = UrlRules(no_external_links=True)
    assert r.admit("http://b/", "a", 3) == "outSite"
    assert r.admit("http://a/", "a", 3) == 2
    lock = UrlRules(lock_site=True)
    lock.lock("http://seed.test/")
    assert lock.admit("http://other.test/", "seed.test", 3) == "outSite"
    assert lock.admit("http://seed.test/a", "seed.test", 3) == 2
    dom = UrlRules(limit_to_domain=(".fr", "dk"))
    assert dom.check("http://a.fr/") is None
    assert dom.check("http://x.dk/") is None and dom.check("http://dk/") is None
    assert dom.check("http://a.com/") == "outDomain"
    assert dom.check("http://afr/") == "outDomain"


def test_extensions_and_cgi():
    r = UrlRules(forbidden_extensions=(".pdf", "JPG", ".html", ".htm"), get_cgi=False)
    assert r.check("http://a/doc.PDF") == "forbiddenExtension"
    assert r.check("http://a/pic.jpg") == "forbiddenExtension"
    assert r.check("http://a/page.html") is None  # never forbidden
    assert r.check("http://a/x.htm") is None
    assert r.check("http://a/dir.pdf/") is None  # a directory
    assert r.check("http://a/search?q=1") == "cgi"
    assert UrlRules(get_cgi=True).check("http://a/s?q=x.pdf") is None
    assert UrlRules(forbidden_extensions=(".pdf",)).check("http://a/s?q=x.pdf") is None


def test_admit_many_is_admit_link_by_link():
    """The batch admission gives what admit gives, under every rule setting."""
    import random

    rng = random.Random(5)
    hosts = ["a.test", "b.test", "a.test:81", "u@a.test", "[::1]", "[::1]:8080", "x.a.test", "a.testx"]
    paths = ["/", "/p.html", "/d/q.pdf", "/s?q=1", "/x.JPG", "/dir.pdf/"]
    urls = [f"{scheme}://{host}{path}" for scheme in ("http", "https") for host in hosts for path in paths]
    seen_reasons = set()
    for _ in range(300):
        rules = UrlRules(depth_in_site=rng.randint(0, 3), depth_by_site=rng.random() < 0.5,
                         no_external_links=rng.random() < 0.3, lock_site=rng.random() < 0.3,
                         get_cgi=rng.random() < 0.7,
                         limit_to_domain=rng.choice([(), (".test",), ("b.test",)]),
                         forbidden_extensions=rng.choice([(), (".pdf", "jpg")]))
        rules.lock("http://a.test/")
        page = rng.choice(urls)
        depth = rng.randint(0, 3)
        redirect = rng.random() < 0.2
        links = rng.sample(urls, 30)
        ok, depths, refused = rules.admit_many(links, page, depth, redirect=redirect)
        want_ok, want_depths, want_refused = [], [], {}
        for link in links:
            verdict = rules.admit(link, host_of(page), depth, redirect=redirect)
            if isinstance(verdict, str):
                want_refused[verdict] = want_refused.get(verdict, 0) + 1
            else:
                want_ok.append(link)
                want_depths.append(verdict)
        assert (ok, depths, refused) == (want_ok, want_depths, want_refused), (page, depth, redirect)
        seen_reasons.update(refused)
    assert seen_reasons == {"outSite", "tooDeep", "outDomain", "cgi", "forbiddenExtension"}
