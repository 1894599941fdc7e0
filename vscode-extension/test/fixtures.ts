/**
 * What the tests set up: the extension's home and context, a ServerSession as activate() makes one, pip kept off
 * every index, and real interpreters, each made in a temporary folder in well under a second (no pip is installed
 * into them): a venv that sees this machine's packages but not its dice-lsp, a venv with pip only, and a Python that
 * PEP 668 marks as externally managed.
 */

import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";
import { Uri } from "./vscode-mock";
import { ExtensionHome } from "../src/launch";
import { ServerSession } from "../src/server";
import { ServerStatus } from "../src/status";

export const EXTENSION_ROOT = path.resolve(__dirname, "..", "..");
export const REPOSITORY = path.resolve(EXTENSION_ROOT, "..");
const manifest = JSON.parse(fs.readFileSync(path.join(EXTENSION_ROOT, "package.json"), "utf8")) as { version: string };

/** The extension's home with its global storage in `storage`. */
export function testHome(storage: string): ExtensionHome {
    return { root: EXTENSION_ROOT, storage, version: manifest.version };
}

/** What activate() reads from its ExtensionContext, with the global storage in `storage`. */
export function extensionContext(storage: string) {
    return {
        subscriptions: [] as { dispose(): unknown }[],
        extensionPath: EXTENSION_ROOT,
        globalStorageUri: Uri.file(storage),
        extension: { packageJSON: manifest },
    };
}

/** A ServerSession as activate() makes one, with its global storage in `storage`. */
export function session(storage: string): ServerSession {
    const log = vscode.window.createOutputChannel("DICE", { log: true });
    const status = new ServerStatus(vscode.languages.createLanguageStatusItem("dice.status", { language: "python" }));
    return new ServerSession(log, status, undefined, testHome(storage));
}

/**
 * python3's facts: its installation's executable (a venv's base: run with PYTHONHOME, a venv's own would find its
 * pyvenv.cfg and be no managed Python), standard library, every site-packages folder it imports from (python3 may be
 * a venv, whose own folder holds little, over its base's) and the folder its pip is in.
 */
const FACTS = "import json, os, sys, sysconfig as c, pip; print(json.dumps([getattr(sys, '_base_executable', " +
    "sys.executable), c.get_path('stdlib'), " +
    "[p for p in sys.path if os.path.basename(p) in ('site-packages', 'dist-packages')], " +
    "os.path.dirname(pip.__path__[0])]))";
const SYSTEM = JSON.parse(execFileSync("python3", ["-c", FACTS], { encoding: "utf8" })) as
    [string, string, string[], string];
const [SYSTEM_PYTHON, SYSTEM_STDLIB, SYSTEM_SITES, PIP_SITE] = SYSTEM;

/** The environment for pip in tests: no index, no find-links, no config (this machine's points at a torch wheel). */
export function hermeticPip(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
    const out: NodeJS.ProcessEnv = { ...env, PIP_CONFIG_FILE: os.devNull, PIP_NO_INDEX: "1" };
    delete out.PIP_FIND_LINKS;
    delete out.PIP_EXTRA_INDEX_URL;
    delete out.PIP_INDEX_URL;
    return out;
}

/** A venv (no pip of its own) whose site-packages lists `folders` in a path file. */
function venv(folder: string, folders: string[]): string {
    execFileSync("python3", ["-m", "venv", "--without-pip", folder]);
    const python = path.join(folder, "bin", "python");
    const purelib = "import sysconfig; print(sysconfig.get_path('purelib'))";
    const site = execFileSync(python, ["-c", purelib], { encoding: "utf8" });
    fs.writeFileSync(path.join(site.trim(), "reach.pth"), folders.map((item) => `${item}\n`).join(""));
    return python;
}

/**
 * A venv that imports torch, pygls and the rest from python3's site-packages (a path file names it), but not dice_lsp:
 * python3 has dice-lsp as an editable install, whose import hook only the site-packages' own path files install.
 * A user's environment with the dependencies and without dice-lsp.
 */
export function venvWithDependencies(folder: string): string {
    return venv(folder, SYSTEM_SITES);
}

/** A venv that has pip (python3's, through a folder that holds only it) and nothing else. */
export function venvWithPipOnly(folder: string): string {
    const pipOnly = path.join(folder, "pip-only");
    fs.mkdirSync(pipOnly, { recursive: true });
    fs.symlinkSync(path.join(PIP_SITE, "pip"), path.join(pipOnly, "pip"));
    return venv(path.join(folder, "venv"), [pipOnly]);
}

/**
 * A Python marked externally managed (PEP 668) as a distribution marks its system Python: an installation (python3's
 * files, linked) whose standard library holds EXTERNALLY-MANAGED, with pip and nothing else in its site-packages.
 * Started through a script that sets PYTHONHOME to it.
 */
export function externallyManagedPython(folder: string): string {
    const home = path.join(folder, "system");
    const stdlib = path.join(home, "lib", path.basename(SYSTEM_STDLIB));
    fs.mkdirSync(path.join(stdlib, "site-packages"), { recursive: true });
    for (const name of fs.readdirSync(SYSTEM_STDLIB)) {
        if (name !== "site-packages") {
            fs.symlinkSync(path.join(SYSTEM_STDLIB, name), path.join(stdlib, name));
        }
    }
    fs.symlinkSync(path.join(PIP_SITE, "pip"), path.join(stdlib, "site-packages", "pip"));
    fs.writeFileSync(path.join(stdlib, "EXTERNALLY-MANAGED"), "[externally-managed]\nError=Use apt, or a venv.\n");
    const python = path.join(folder, "python3");
    fs.writeFileSync(python, `#!/bin/sh\nPYTHONHOME='${home}' exec '${SYSTEM_PYTHON}' "$@"\n`, { mode: 0o755 });
    return python;
}

/** An interpreter that runs but cannot import dice_lsp: python3 without site-packages, where pip installs it. */
export function interpreterWithoutDiceLsp(folder: string): string {
    const wrapper = path.join(folder, "python-without-site");
    fs.writeFileSync(wrapper, '#!/bin/sh\nexec python3 -S "$@"\n', { mode: 0o755 });
    return wrapper;
}

export function temporaryFolder(prefix: string): string {
    return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}
