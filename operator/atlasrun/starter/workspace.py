"""The starter suite's sample workspace: the data root the offline servers see (as ``/data``).

``create_workspace(dest)`` writes, deterministically and byte for byte on every run:

* ``sales/sales_2023.csv``, ``sales/sales_2024.csv`` - revenue and units by region and quarter
* ``inventory/inventory.csv`` - stock per SKU and warehouse, with reorder points and unit costs
* ``hr/employees.csv`` - a small employee directory
* ``logs/app.log`` - an application log with INFO/WARN/ERROR lines
* ``notes/*.md`` and ``README.md`` - meeting notes, the weekly sync, the on-call rota
* ``projects/atlas-web`` - a Git repository: five commits on ``main`` by four authors and one on
  ``feature/csv-export``, all with fixed identities and dates, so the commit hashes never change
* ``memory.jsonl`` - the knowledge graph the memory server reads (``MEMORY_FILE_PATH``)

Every file and directory gets a fixed mtime, and the Git index is rebuilt without stat data,
so two workspaces are identical file for file (including ``.git``).

Overwriting: ``dest`` may be missing or empty, or a previous starter workspace (it holds the
``.atlas-workspace`` marker), which is deleted and recreated. Any other non-empty directory is
refused with an ``InputError``, so a typo never deletes someone's files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from atlasrun.errors import InputError

MARKER = ".atlas-workspace"
MARKER_TEXT = "atlasrun starter workspace v1\n"
FIXED_MTIME = 1710504000  # 2024-03-15T12:00:00Z

# (units, revenue) for Q1..Q4, per region and year.
SALES = {
    2023: {
        "North": [(1150, 166750), (1190, 172550), (1260, 182700), (1340, 194300)],
        "South": [(1010, 136350), (1040, 140400), (1075, 145125), (1120, 151200)],
        "East": [(1380, 213900), (1350, 209250), (1420, 220100), (1490, 230950)],
        "West": [(940, 145700), (1010, 156550), (1105, 171275), (1180, 182900)],
        "Central": [(820, 110700), (840, 113400), (815, 110025), (870, 117450)],
    },
    2024: {
        "North": [(1240, 186000), (1310, 196500), (1405, 210750), (1520, 228000)],
        "South": [(980, 137200), (1025, 143500), (1110, 155400), (1190, 166600)],
        "East": [(1460, 233600), (1390, 222400), (1530, 244800), (1610, 257600)],
        "West": [(1120, 179200), (1245, 199200), (1380, 220800), (1470, 235200)],
        "Central": [(760, 106400), (805, 112700), (790, 110600), (845, 118300)],
    },
}

INVENTORY = """sku,product,category,warehouse,on_hand,reorder_point,unit_cost
SKU-1001,Trail Backpack 30L,Outdoor,Reno,42,50,38.50
SKU-1002,Insulated Bottle 750ml,Outdoor,Reno,310,120,9.75
SKU-1003,Camp Stove Mini,Outdoor,Columbus,18,25,54.00
SKU-1004,LED Headlamp,Outdoor,Columbus,96,60,14.20
SKU-1005,Wireless Mouse,Electronics,Reno,140,80,12.40
SKU-1006,USB-C Hub 7-port,Electronics,Columbus,35,40,27.90
SKU-1007,Noise-Cancelling Headphones,Electronics,Reno,22,20,89.00
SKU-1008,Mechanical Keyboard,Electronics,Columbus,61,30,64.50
SKU-1009,Standing Desk Mat,Office,Reno,16,15,31.00
SKU-1010,Ergonomic Chair,Office,Columbus,9,12,189.00
SKU-1011,Desk Lamp,Office,Reno,74,40,22.60
SKU-1012,Cable Organizer Kit,Office,Columbus,205,100,6.30
"""

EMPLOYEES = """id,name,department,title,location,start_date,salary
E001,Priya Natarajan,Engineering,Staff Engineer,Berlin,2019-04-01,142000
E002,Marcus Webb,Engineering,Senior Engineer,Austin,2020-08-17,128000
E003,Lena Okafor,Engineering,Engineering Manager,Berlin,2018-11-05,151000
E004,Diego Alvarez,Engineering,Software Engineer,Austin,2022-02-14,104000
E005,Hannah Cole,Sales,Account Executive,Austin,2021-06-01,98000
E006,Kenji Sato,Sales,Account Manager,Tokyo,2020-01-20,102000
E007,Amara Singh,Operations,Operations Lead,Bangalore,2019-07-08,91000
E008,Tom Fischer,Finance,Controller,Berlin,2017-09-11,135000
E009,Sofia Rossi,Marketing,Marketing Manager,Berlin,2021-03-15,112000
E010,Ravi Menon,Engineering,Software Engineer,Bangalore,2023-01-09,78000
E011,Grace Kim,Sales,Sales Director,Austin,2016-05-23,165000
E012,Omar Haddad,Operations,Logistics Coordinator,Bangalore,2022-10-03,72000
E013,Yuki Tanaka,Engineering,QA Engineer,Tokyo,2021-09-27,96000
E014,Elena Petrova,Finance,Financial Analyst,Berlin,2023-06-12,84000
"""

# (time, level, component, code or "", message): 24 lines, 6 ERROR, 5 WARN.
_LOG = [
    ("08:00:01", "INFO", "gateway", "", "service started version=2.4.0"),
    ("08:00:02", "INFO", "scheduler", "", "loaded 14 report schedules"),
    ("08:03:17", "INFO", "gateway", "", "GET /api/reports 200 41ms"),
    ("08:05:42", "WARN", "gateway", "", "slow response GET /api/export 2310ms"),
    ("08:07:09", "ERROR", "db", "E_DB_CONN", "connection refused host=db-primary"),
    ("08:07:10", "INFO", "db", "", "failover to db-replica succeeded"),
    ("08:12:33", "INFO", "gateway", "", "GET /api/reports 200 38ms"),
    ("08:15:00", "ERROR", "gateway", "E_TIMEOUT", "upstream timeout after 30s route=/api/export"),
    ("08:15:31", "WARN", "ratelimit", "", "client acme-mobile throttled 120/min"),
    ("08:20:12", "INFO", "scheduler", "", "report weekly-sales sent"),
    ("08:22:48", "ERROR", "auth", "E_AUTH", "invalid token for user=svc-billing"),
    ("08:25:05", "INFO", "gateway", "", "GET /api/health 200 2ms"),
    ("08:31:19", "WARN", "db", "", "replication lag 4.2s"),
    ("08:33:40", "ERROR", "gateway", "E_TIMEOUT", "upstream timeout after 30s route=/api/export"),
    ("08:35:02", "INFO", "gateway", "", "POST /api/reports 201 88ms"),
    ("08:40:27", "INFO", "scheduler", "", "report inventory-daily sent"),
    ("08:41:55", "WARN", "ratelimit", "", "client northwind-sync throttled 120/min"),
    ("08:44:13", "ERROR", "db", "E_DB_CONN", "connection refused host=db-primary"),
    ("08:45:00", "INFO", "db", "", "db-primary back online"),
    ("08:50:36", "ERROR", "gateway", "E_TIMEOUT", "upstream timeout after 30s route=/api/reports"),
    ("08:52:14", "INFO", "gateway", "", "GET /api/reports 200 45ms"),
    ("08:55:59", "WARN", "gateway", "", "slow response GET /api/reports 1875ms"),
    ("08:58:21", "INFO", "gateway", "", "GET /api/health 200 3ms"),
    ("09:00:00", "INFO", "scheduler", "", "hourly rollup complete rows=5120"),
]

README = """# Acme Outfitters workspace

Sample data for the AtlasRun starter suite.

- `sales/` - revenue and units by region and quarter (2023 and 2024)
- `inventory/inventory.csv` - stock on hand per SKU and warehouse (Reno, Columbus)
- `hr/employees.csv` - the employee directory
- `logs/app.log` - the atlas-web application log for 2024-03-14
- `notes/` - meeting notes, the weekly sync and the on-call rota
- `projects/atlas-web` - the atlas-web repository
"""

NOTES = {
    "notes/meeting-2024-03-12.md": """# Release planning - 2024-03-12

Attendees: Lena Okafor, Priya Natarajan, Marcus Webb, Hannah Cole

## Decisions
- atlas-web 2.4.0 ships on 2024-03-28.
- The default API rate limit stays at 120 requests per minute.

## Action items
- Lena Okafor: finalize the release checklist (due 2024-03-20)
- Marcus Webb: load-test the gateway at the new rate limit (due 2024-03-18)
- Hannah Cole: confirm Northwind Traders renewal terms (due 2024-03-22)
- Priya Natarajan: review the CSV export branch (due 2024-03-19)
""",
    "notes/weekly-sync.md": """# Platform weekly sync

- When: every Tuesday at 17:30 Asia/Tokyo time (hosted by Kenji Sato)
- Where: the Tokyo office, with a video link for Berlin, Austin and Bangalore
- Standing agenda: release status, incidents, customer escalations
""",
    "notes/oncall.md": """# On-call rota, March 2024

| week starting | primary | secondary |
|---|---|---|
| 2024-03-04 | Marcus Webb | Ravi Menon |
| 2024-03-11 | Diego Alvarez | Yuki Tanaka |
| 2024-03-18 | Ravi Menon | Priya Natarajan |
| 2024-03-25 | Yuki Tanaka | Marcus Webb |

Handover happens at 09:00 UTC every Monday.
""",
}

_PEOPLE = {
    "Priya Natarajan": ("person", ["Staff Engineer based in Berlin", "Tech lead of atlas-web"]),
    "Marcus Webb": ("person", ["Senior Engineer based in Austin", "Owns the API gateway rate limiter"]),
    "Diego Alvarez": ("person", ["Software Engineer based in Austin", "Building the CSV export feature"]),
    "Lena Okafor": ("person", ["Engineering Manager based in Berlin", "Release manager for atlas-web 2.4.0"]),
    "Hannah Cole": ("person", ["Account Executive based in Austin"]),
    "Kenji Sato": ("person", ["Account Manager based in Tokyo", "Hosts the platform weekly sync"]),
}
_OTHERS = {
    "atlas-web": (
        "project",
        [
            "Customer-facing analytics dashboard",
            "Current release 2.4.0",
            "Repository at /data/projects/atlas-web",
        ],
    ),
    "Platform Team": ("team", ["Owns atlas-web and the API gateway", "Meets every Tuesday"]),
    "Northwind Traders": (
        "customer",
        [
            "Region: West",
            "Contract renewal date: 2024-09-30",
            "Annual contract value: 84000 USD",
            "Integration: northwind-sync",
        ],
    ),
    "Globex Corporation": (
        "customer",
        ["Region: East", "Contract renewal date: 2024-06-15", "Annual contract value: 126000 USD"],
    ),
    "Initech": (
        "customer",
        ["Region: Central", "Contract renewal date: 2024-11-01", "Annual contract value: 45000 USD"],
    ),
}
_RELATIONS = [
    ("Priya Natarajan", "atlas-web", "leads"),
    ("Priya Natarajan", "Platform Team", "member_of"),
    ("Marcus Webb", "Platform Team", "member_of"),
    ("Diego Alvarez", "Platform Team", "member_of"),
    ("Lena Okafor", "Platform Team", "manages"),
    ("Platform Team", "atlas-web", "owns"),
    ("Hannah Cole", "Northwind Traders", "account_manager_for"),
    ("Hannah Cole", "Initech", "account_manager_for"),
    ("Kenji Sato", "Globex Corporation", "account_manager_for"),
    ("Northwind Traders", "atlas-web", "uses"),
    ("Globex Corporation", "atlas-web", "uses"),
]

# The atlas-web history: (author, email, date, message, {path: content}).
_AUTHORS = {
    "priya": ("Priya Natarajan", "priya.natarajan@acme-outfitters.example"),
    "marcus": ("Marcus Webb", "marcus.webb@acme-outfitters.example"),
    "diego": ("Diego Alvarez", "diego.alvarez@acme-outfitters.example"),
    "lena": ("Lena Okafor", "lena.okafor@acme-outfitters.example"),
}
_SETTINGS = "app: atlas-web\nversion: {version}\nrate_limit_per_minute: {limit}\nexport_formats: [json]\n"
_GATEWAY_V1 = '''"""HTTP gateway for the atlas-web API."""


def handle(request):
    return {"status": 200, "path": request["path"]}
'''
_GATEWAY_V2 = '''"""HTTP gateway for the atlas-web API."""

import time


class TokenBucket:
    def __init__(self, rate_per_minute):
        self.capacity = rate_per_minute
        self.tokens = rate_per_minute
        self.updated = time.monotonic()

    def allow(self):
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.capacity / 60)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def handle(request, bucket):
    if not bucket.allow():
        return {"status": 429, "path": request["path"]}
    return {"status": 200, "path": request["path"]}
'''
_TESTS = """from gateway import TokenBucket


def test_bucket_allows_up_to_capacity():
    bucket = TokenBucket(2)
    assert bucket.allow() and bucket.allow()
"""
_SCHEDULER = '''"""Report scheduler: runs are stored and compared in UTC."""

from datetime import datetime, timezone


def next_run(now=None):
    now = now or datetime.now(timezone.utc)
    return now.replace(minute=0, second=0, microsecond=0)
'''
_EXPORT = '''"""CSV export of report rows."""

import csv
import io


def to_csv(rows):
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=sorted(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
'''
_CHANGELOG_1 = "# Changelog\n\n## 2.3.0\n- Initial dashboard and API gateway\n"
_CHANGELOG_2 = (
    "# Changelog\n\n## 2.4.0 - 2024-03-05\n- Token-bucket rate limiting in the API gateway\n"
    "- Report scheduler uses UTC throughout\n\n## 2.3.0\n- Initial dashboard and API gateway\n"
)
_HISTORY = [
    (
        "priya",
        "2024-01-15T09:00:00+01:00",
        "Initial project skeleton",
        {
            "README.md": "# atlas-web\n\nCustomer-facing analytics dashboard.\n",
            "src/gateway.py": _GATEWAY_V1,
            "config/settings.yaml": _SETTINGS.format(version="2.3.0", limit=60),
            "CHANGELOG.md": _CHANGELOG_1,
        },
    ),
    (
        "marcus",
        "2024-02-02T14:30:00-06:00",
        "Add token-bucket rate limiter to the API gateway",
        {"src/gateway.py": _GATEWAY_V2, "tests/test_gateway.py": _TESTS},
    ),
    (
        "diego",
        "2024-02-20T11:15:00-06:00",
        "Fix timezone handling in the report scheduler",
        {"src/scheduler.py": _SCHEDULER},
    ),
    (
        "lena",
        "2024-03-05T16:45:00+01:00",
        "Release 2.4.0: bump version and update changelog",
        {"config/settings.yaml": _SETTINGS.format(version="2.4.0", limit=60), "CHANGELOG.md": _CHANGELOG_2},
    ),
    (
        "marcus",
        "2024-03-11T10:20:00-05:00",
        "Raise default rate limit to 120 requests per minute",
        {"config/settings.yaml": _SETTINGS.format(version="2.4.0", limit=120)},
    ),
]
_BRANCH = (
    "feature/csv-export",
    "diego",
    "2024-03-14T15:05:00-05:00",
    "Add CSV export endpoint",
    {
        "src/export.py": _EXPORT,
        "config/settings.yaml": _SETTINGS.format(version="2.4.0", limit=120).replace("[json]", "[json, csv]"),
    },
)


def _sales_text(year: int) -> str:
    rows = [
        f"{year},{region},Q{q},{units},{revenue}"
        for region, quarters in SALES[year].items()
        for q, (units, revenue) in enumerate(quarters, start=1)
    ]
    return "year,region,quarter,units,revenue\n" + "\n".join(rows) + "\n"


def _log_text() -> str:
    lines = []
    for clock, level, component, code, message in _LOG:
        text = f"{code} {message}" if code else message
        lines.append(f"2024-03-14T{clock}Z {level:<5} [{component}] {text}")
    return "\n".join(lines) + "\n"


def _memory_text() -> str:
    rows = [
        {"type": "entity", "name": name, "entityType": kind, "observations": obs}
        for name, (kind, obs) in {**_PEOPLE, **_OTHERS}.items()
    ]
    rows += [{"type": "relation", "from": a, "to": b, "relationType": rel} for a, b, rel in _RELATIONS]
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))


def _git(repo: Path, *args: str, who: str = "priya", date: str = "2024-01-15T09:00:00+00:00") -> None:
    name, email = _AUTHORS[who]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo),
        "LC_ALL": "C",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
        "GIT_COMMITTER_DATE": date,
    }
    proc = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")


def _commit(repo: Path, who: str, date: str, message: str, files: dict[str, str]) -> None:
    for rel, text in files.items():
        _write(repo, rel, text)
    _git(repo, "add", "--", *sorted(files), who=who, date=date)
    _git(repo, "commit", "-q", "-m", message, who=who, date=date)


def _make_repo(repo: Path) -> None:
    repo.mkdir(parents=True)
    # No template: no sample hooks or description, so .git does not depend on the git install.
    _git(repo, "init", "-q", "--template=", "--initial-branch=main")
    for who, date, message, files in _HISTORY:
        _commit(repo, who, date, message, files)
    branch, who, date, message, files = _BRANCH
    _git(repo, "checkout", "-q", "-b", branch, who=who, date=date)
    _commit(repo, who, date, message, files)
    _git(repo, "checkout", "-q", "main", who=who, date=date)
    # The index caches stat data (inode, ctime...): rebuild it from HEAD without any, so it is
    # byte-identical on every run (git refreshes it on the next status).
    (repo / ".git" / "index").unlink()
    _git(repo, "read-tree", "HEAD")


def _prepare(dest: Path) -> None:
    if dest.exists() and not dest.is_dir():
        raise InputError("exists and is not a directory", where=str(dest))
    if dest.is_dir() and any(dest.iterdir()):
        if not (dest / MARKER).is_file():
            raise InputError(
                "directory is not empty and is not a starter workspace; choose a new or empty directory",
                where=str(dest),
            )
        shutil.rmtree(dest)  # a previous starter workspace: recreate it from scratch
    dest.mkdir(parents=True, exist_ok=True)


def create_workspace(dest: Path) -> Path:
    """Create (or recreate) the starter workspace at ``dest``; returns its absolute path."""
    dest = Path(dest).expanduser().absolute()
    _prepare(dest)
    files = {
        MARKER: MARKER_TEXT,
        "README.md": README,
        "sales/sales_2023.csv": _sales_text(2023),
        "sales/sales_2024.csv": _sales_text(2024),
        "inventory/inventory.csv": INVENTORY,
        "hr/employees.csv": EMPLOYEES,
        "logs/app.log": _log_text(),
        "memory.jsonl": _memory_text(),
        **NOTES,
    }
    for rel, text in sorted(files.items()):
        _write(dest, rel, text)
    _make_repo(dest / "projects" / "atlas-web")
    for path in [*sorted(dest.rglob("*"), reverse=True), dest]:  # children before their parents
        os.utime(path, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
    return dest
