/**
 * How the server process is started: `<python> -m dice_lsp <dice.serverArgs>`.
 * The interpreter is `dice.interpreter`, else the Python extension's selection, else `python3` from PATH.
 */

import { execFile } from "node:child_process";
import * as vscode from "vscode";
import { PythonEnvironments, selectedInterpreter } from "./python";

export const FALLBACK_INTERPRETER = "python3";

/** How long the interpreter may take to import `dice_lsp` (a cap on a wait, far above the ~0.1 s it takes). */
const IMPORT_CHECK_MS = 60_000;

export interface LaunchOptions {
    readonly command: string;
    readonly args: readonly string[];
    /** Where the interpreter came from, for the log: "dice.interpreter", "Python extension" or "fallback". */
    readonly source: string;
}

/** Settings whose change restarts the server (the others are re-read by the running server). */
export const LAUNCH_SETTINGS = ["dice.interpreter", "dice.serverArgs"] as const;

/** The workspace folder whose interpreter runs the server: one server serves the window. */
export function launchScope(): vscode.Uri | undefined {
    return vscode.workspace.workspaceFolders?.[0]?.uri;
}

export async function resolveLaunch(
    scope: vscode.Uri | undefined,
    environments: PythonEnvironments | undefined,
): Promise<LaunchOptions> {
    const config = vscode.workspace.getConfiguration("dice", scope);
    const args = ["-m", "dice_lsp", ...stringArray(config.get<unknown>("serverArgs"))];
    const configured = config.get<string>("interpreter")?.trim() ?? "";
    if (configured !== "") {
        return { command: configured, args, source: "dice.interpreter" };
    }
    // An untrusted workspace may select an interpreter inside itself (a .venv it ships); running that would run
    // the workspace's code, so only an interpreter from user settings or PATH is used until trust is granted.
    if (environments !== undefined && vscode.workspace.isTrusted) {
        const selected = await selectedInterpreter(environments, scope);
        if (selected !== undefined && selected !== "") {
            return { command: selected, args, source: "Python extension" };
        }
    }
    return { command: FALLBACK_INTERPRETER, args, source: "fallback" };
}

export function sameLaunch(a: LaunchOptions | undefined, b: LaunchOptions | undefined): boolean {
    return (
        a !== undefined &&
        b !== undefined &&
        a.command === b.command &&
        a.args.length === b.args.length &&
        a.args.every((arg, i) => arg === b.args[i])
    );
}

export function describeLaunch(launch: LaunchOptions): string {
    return [launch.command, ...launch.args].join(" ");
}

function stringArray(value: unknown): string[] {
    return Array.isArray(value) ? value.filter((item): item is string => typeof item === "string") : [];
}

/**
 * Why `launch` cannot run the server, or undefined when it can: its interpreter does not start, or `dice_lsp` does
 * not import in it (not installed there). Asked before the language client starts the server, which would start and
 * lose it again until VS Code gives up with "the server crashed 5 times", naming neither cause. An interpreter that
 * answers nothing within the cap is given the benefit of the doubt: the client then shows what happens.
 */
export function serverMissing(launch: LaunchOptions, cwd: string | undefined): Promise<string | undefined> {
    return new Promise((resolve) => {
        execFile(launch.command, ["-c", "import dice_lsp"], { cwd, timeout: IMPORT_CHECK_MS }, (error, _out, err) => {
            if (error === null || error.killed) {
                resolve(undefined);
            } else if ((error as NodeJS.ErrnoException).code === "ENOENT") {
                resolve(`the interpreter \`${launch.command}\` was not found`);
            } else {
                const last = String(err).trim().split("\n").pop();
                resolve(last !== undefined && last !== "" ? last : error.message);
            }
        });
    });
}
