/**
 * Whether an interpreter can run the server, asked before the language client starts it: the client would start and
 * lose a server that cannot start until VS Code reports "the server crashed 5 times", naming no cause.
 * The asking is python/probe.py, run where and as the server would run.
 */

import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { ProcessPlace } from "./launch";

/** A cap on a wait, far above the ~0.1 s the probe takes (a first import on a cold disk can take seconds). */
const PROBE_MS = 60_000;

export interface Probe {
    /** Why the server cannot start with this interpreter, or undefined when it can. */
    readonly problem?: string;
    /** Whether the interpreter ran at all (pip can only be offered then). */
    readonly runs: boolean;
    /** The folder `import dice_lsp` found. */
    readonly origin?: string;
    /** dice-lsp's requirements this interpreter lacks ("torch>=2.6"); asked with `dependencies` only. */
    readonly missing: readonly string[];
    /** pip refuses to install into it without --break-system-packages (PEP 668). */
    readonly externallyManaged: boolean;
}

interface ProbeOutput {
    error?: string;
    origin?: string;
    missing?: string[];
    externallyManaged?: boolean;
}

/** The probe's source, read from the extension's folder `root`. */
export function probeSource(root: string): string {
    return fs.readFileSync(path.join(root, "python", "probe.py"), "utf8");
}

/**
 * What `python` says of running the server in `place`; with `dependencies`, dice-lsp's unmet requirements too (the
 * shipped wheel brings dice_lsp only). An interpreter that answers nothing within the cap is given the benefit of
 * the doubt: the language client then shows what happens.
 */
export function probeServer(python: string, root: string, place: ProcessPlace, dependencies: boolean): Promise<Probe> {
    const args = ["-c", probeSource(root), ...(dependencies ? ["--dependencies"] : [])];
    return new Promise((resolve) => {
        execFile(python, args, { cwd: place.cwd, env: place.env, timeout: PROBE_MS }, (error, out, err) => {
            if (error !== null && (error as NodeJS.ErrnoException).code === "ENOENT") {
                resolve({ problem: `the interpreter \`${python}\` was not found`, runs: false, ...NOTHING });
            } else if (error?.killed) {
                resolve({ runs: true, ...NOTHING });
            } else {
                resolve(reading(out, err, error));
            }
        });
    });
}

const NOTHING = { missing: [], externallyManaged: false } as const;

function reading(out: string, err: string, error: Error | null): Probe {
    let answer: ProbeOutput;
    try {
        answer = JSON.parse(out.trim().split("\n").pop() ?? "") as ProbeOutput;
    } catch {
        // Not our answer: a Python too old to run the probe, or a broken start-up (site, sitecustomize).
        const last = err.trim().split("\n").pop();
        const problem = last || error?.message || "the interpreter's answer could not be read";
        return { problem, runs: true, ...NOTHING };
    }
    const missing = answer.missing ?? [];
    const problem =
        answer.error ?? (missing.length > 0 ? `it lacks what dice-lsp needs: ${missing.join(", ")}` : undefined);
    const externallyManaged = answer.externallyManaged === true;
    return { problem, runs: true, origin: answer.origin, missing, externallyManaged };
}
