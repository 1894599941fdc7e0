/**
 * The server's stderr in the DICE log: the language client appends it in chunks as they arrive, and a log channel
 * makes each append a record of its own, so a line's newline showed as a blank line after it. Here chunks are cut
 * into lines, and each line becomes one record at the level the server logged it (`dice serve`'s format:
 * "<date> <time>,<ms> <logger> <LEVEL> <message>"; the channel adds its own time).
 */

import * as vscode from "vscode";

/** What a line of the server's log says: its logger and message, at which level; undefined for any other line. */
export interface ServerRecord {
    readonly level: "error" | "warn" | "info" | "debug";
    readonly text: string;
}

const RECORD = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} (\S+) (CRITICAL|ERROR|WARNING|INFO|DEBUG) (.*)$/;
const LEVELS: Record<string, ServerRecord["level"]> = {
    CRITICAL: "error",
    ERROR: "error",
    WARNING: "warn",
    INFO: "info",
    DEBUG: "debug",
};

export function serverRecord(line: string): ServerRecord | undefined {
    const match = RECORD.exec(line);
    if (match === null) {
        return undefined;
    }
    const [, logger, level, message] = match as unknown as [string, string, string, string];
    return { level: LEVELS[level] ?? "info", text: `${logger}: ${message}` };
}

export class ServerOutput implements vscode.OutputChannel {
    private partial = "";
    /** The level of the server's last record: a traceback's lines follow the record that carries it. */
    private level: ServerRecord["level"] = "info";

    constructor(private readonly log: vscode.LogOutputChannel) {}

    get name(): string {
        return this.log.name;
    }

    append(value: string): void {
        const lines = (this.partial + value).split(/\r?\n/);
        this.partial = lines.pop() ?? "";
        lines.forEach((line) => this.write(line));
    }

    appendLine(value: string): void {
        this.append(`${value}\n`);
    }

    replace(value: string): void {
        this.clear();
        this.append(value);
    }

    clear(): void {
        this.partial = "";
        this.log.clear();
    }

    show(columnOrPreserveFocus?: vscode.ViewColumn | boolean, preserveFocus?: boolean): void {
        if (typeof columnOrPreserveFocus === "boolean") {
            this.log.show(columnOrPreserveFocus);
        } else {
            this.log.show(columnOrPreserveFocus, preserveFocus);
        }
    }

    hide(): void {
        this.log.hide();
    }

    /** The client disposes its output channel when it is disposed: the log is the extension's and stays open. */
    dispose(): void {
        if (this.partial !== "") {
            this.write(this.partial);
            this.partial = "";
        }
    }

    private write(line: string): void {
        if (line.trim() === "") {
            return;
        }
        const record = serverRecord(line);
        if (record !== undefined) {
            this.level = record.level;
        }
        const text = record?.text ?? line;
        // The server filters by dice.logLevel already: its debug records are shown (as info, marked) rather than
        // hidden again by the channel's own level
        if (this.level === "debug") {
            this.log.info(`[debug] ${text}`);
        } else {
            this.log[this.level](text);
        }
    }
}
